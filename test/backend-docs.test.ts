/**
 * docs/library.md's example is examples/quickstart.ts word for word, and it runs: two steps on the tiny model.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { quickstart } from '../examples/quickstart.js';
import { TINY_MODEL } from './backend-helpers.js';
import { REPO_ROOT } from './helpers/servers.js';

describe('docs/library.md', () => {
  it('shows examples/quickstart.ts as it is', async () => {
    const doc = await readFile(join(REPO_ROOT, 'docs', 'library.md'), 'utf8');
    const file = await readFile(join(REPO_ROOT, 'examples', 'quickstart.ts'), 'utf8');
    const block = /```ts quickstart\n([\s\S]*?)```/.exec(doc)?.[1];
    expect(block).toBe(file);
  });

  it('runs the quickstart for two steps', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mcprl-quickstart-'));
    try {
      const results = await quickstart({ dir, baseModel: TINY_MODEL, steps: 2 });
      expect(results).toHaveLength(2);
      const trained = results.filter((r) => r.trained);
      // A step without signal (every reward alike) trains nothing and keeps the step; one with signal moves it.
      expect(results.map((r) => r.step)).toEqual(results.map((_, i) => results.slice(0, i + 1).filter((r) => r.trained).length));
      expect(trained.length).toBeGreaterThan(0);
      for (const r of trained) expect(Number.isFinite(r.loss)).toBe(true);
      for (const r of results) expect(r.retokenizedTurns).toBe(0);
      const last = results[results.length - 1];
      expect(existsSync(join(dir, 'quickstart', 'numbers', 'checkpoints', `step-${String(last.step).padStart(4, '0')}`, 'adapter_model.safetensors'))).toBe(true);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
