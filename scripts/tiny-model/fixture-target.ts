import { join, resolve } from 'node:path';
import type { Target } from '../../src/mcp/index.js';

const ROOT = resolve(import.meta.dirname, '..', '..');

/** The bookshop fixture server over stdio, run from its TypeScript source. */
export function fixtureTarget(): Target {
  return { kind: 'stdio', command: process.execPath, args: ['--import', 'tsx', join(ROOT, 'fixtures', 'server', 'main.ts')], cwd: ROOT };
}
