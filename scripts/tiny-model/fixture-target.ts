import { join, resolve } from 'node:path';
import type { Target } from '../../src/mcp/index.js';

const ROOT = resolve(import.meta.dirname, '..', '..');

/** The bookshop fixture server over stdio, run from its TypeScript source; with a seed, on a made-up catalogue. */
export function fixtureTarget(catalogue?: number): Target {
  const extra = catalogue === undefined ? [] : ['--catalogue', String(catalogue)];
  return { kind: 'stdio', command: process.execPath, args: ['--import', 'tsx', join(ROOT, 'fixtures', 'server', 'main.ts'), ...extra], cwd: ROOT };
}
