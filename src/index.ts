export { buildProgram } from './cli/main.js';
