/**
 * How a number is written as text, wherever mcprl reads one from text (src/cli/parse-number.ts, and the training
 * settings a command line gives, src/train/config.ts): decimal notation only, since Number() would also take '',
 * ' ', '0x10' and 'Infinity'.
 */
export const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;
