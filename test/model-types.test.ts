/**
 * The supported architectures are listed once: SUPPORTED_MODEL_TYPES in src/hf/config.ts, the one reader of
 * config.json, which refuses any other model_type (help texts name the list). The native engine keeps no list of
 * its own: it runs the architecture the ModelSpec's flags describe and uses model_type only in messages.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SUPPORTED_MODEL_TYPES } from '../src/hf/config.js';
import { REPO_ROOT } from './helpers/servers.js';

function sources(dir: string, ext: RegExp): string[] {
  return readdirSync(join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => ext.test(f) && !f.endsWith('.test.ts'))
    .map((f) => join(dir, f));
}

describe('supported model types', () => {
  it('are listed only in src/hf/config.ts', () => {
    // A list is two of the names quoted side by side, in either language.
    const names = SUPPORTED_MODEL_TYPES.join('|');
    const list = new RegExp(`["'](${names})["']\\s*,\\s*["'](${names})["']`);
    const listed = [...sources('src', /\.ts$/), ...sources('native', /\.(cc|h|cu|cuh)$/)].filter((f) => list.test(readFileSync(join(REPO_ROOT, f), 'utf8')));
    expect(listed).toEqual([join('src', 'hf', 'config.ts')]);
  });
});
