/**
 * The second example environment (examples/higher-lower.ts) trained through a LocalBackend for two steps on
 * the tiny model: the game's rewards follow its rules, and each step trains and serves a new adapter.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_GUESSES, playHigherLower, secretOf } from '../examples/higher-lower.js';
import { LocalBackend, TrainableModel } from '../src/index.js';
import { gatherGames, probe, TINY_MODEL } from './backend-helpers.js';

describe('higher-lower through LocalBackend', () => {
  it('plays by the rules and trains two steps', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mcprl-higher-lower-'));
    const backend = new LocalBackend({ dir });
    try {
      const model = new TrainableModel({ project: 'games', name: 'guess', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 3 } });
      await model.register(backend);
      for (let round = 1; round <= 2; round++) {
        const groups = await gatherGames(model, round, 8, playHigherLower);
        for (const t of groups.flatMap((g) => g.trajectories)) {
          const replies = t.messages.filter((m) => m.role === 'assistant');
          const valid = t.metrics.valid_guesses;
          const found = t.metrics.found === 1;
          // A forfeit is the one invalid reply after the valid ones; otherwise every reply was a valid guess.
          expect(replies.length === valid || (!found && replies.length === valid + 1)).toBe(true);
          expect(replies.length).toBeLessThanOrEqual(MAX_GUESSES);
          expect(t.reward).toBeCloseTo(found ? 1 + 0.25 * (MAX_GUESSES - valid) : 0.1 * valid, 10);
          if (found) expect(replies[replies.length - 1].content!.trim().startsWith(String(secretOf(t.metadata.gameSeed as number)))).toBe(true);
        }
        const r = await model.train(groups, { lr: 2e-3 });
        expect(r.trained).toBe(true);
        expect(r.step).toBe(round);
        expect(Number.isFinite(r.loss)).toBe(true);
        expect((await probe(model)).adapter).toBe(`guess@step-${round}`);
      }
    } finally {
      await backend.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
