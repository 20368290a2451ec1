/**
 * Code size (issue 43): no source file over 600 lines and no function over 120, except those scripts/code-size.ts
 * allows, each with its reason.
 */
import { describe, expect, it } from 'vitest';
import { ALLOWED, longFunctions, MAX_FUNCTION_LINES, offenders } from '../scripts/code-size.js';

describe('code size', () => {
  it('has no file or function over the limits that the allow-list does not name', () => {
    const over = offenders().filter((o) => ALLOWED[o.key] === undefined).map((o) => `${o.key} (${o.lines} lines, limit ${o.limit})`);
    expect(over).toEqual([]);
  });

  it('gives every allow-list entry a one-line reason', () => {
    for (const [key, why] of Object.entries(ALLOWED)) {
      expect(key).toMatch(/^(file|function):(src|native)\//);
      expect(why.trim()).not.toBe('');
      expect(why).not.toContain('\n');
    }
  });

  it('finds long functions, methods and callbacks by name, and leaves short ones', () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  x += ${i};`).join('\n');
    const source = [
      `export function long() {\n${body(MAX_FUNCTION_LINES)}\n}`,
      `function short() {\n${body(3)}\n}`,
      `class K {\n  method() {\n${body(MAX_FUNCTION_LINES)}\n  }\n}`,
      `const arrow = () => {\n${body(MAX_FUNCTION_LINES)}\n};`,
      `server.on('x', () => {\n${body(MAX_FUNCTION_LINES)}\n});`,
    ].join('\n');
    const found = longFunctions('src/x.ts', source);
    expect(found.map((o) => o.name)).toEqual(['long', 'K.method', 'arrow', 'server.on callback']);
    // A body of exactly the limit plus its two brace lines is over it.
    expect(found[0]).toMatchObject({ key: 'function:src/x.ts:long', line: 1, lines: MAX_FUNCTION_LINES + 2 });
  });
});
