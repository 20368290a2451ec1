/**
 * `npm run demo -- --split`: the demo with its rollouts on a `mcprl serve` process of its own, against the same
 * demo in-process, one step on a small scenario set (the demo's settings, the batch cut down to fit CI time).
 *
 * The demo trains at the sampling temperature with constrained tool calls, so the split trainer must get the
 * servers' sampler logprobs (softmax of logits ÷ 0.7 over the constraint's allowed tokens, mcprl_sampler_logprobs)
 * and score its own on the same distribution for truncated importance sampling (Model.score with temperatures and
 * token masks). Then the two runs sample the same tokens (decoding on the CPU is deterministic and batch-invariant)
 * and their step differs only by the float32 noise between the decode path and the trainer's full forward: the
 * logged mismatch under 1e-4 nats (a trainer scoring at temperature 1 would be off by ~0.1 nats and more), the
 * loss and mean ratio within 1e-4. The server process is stopped and the adapter folder (under TMPDIR) removed.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bookshopScenarios } from './faults/cli.js';
import { REPO_ROOT } from './helpers/servers.js';

// The demo samples at temperature 1; 0.7 here keeps the check able to fail: a trainer that scored at temperature 1
// instead of the sampling temperature would agree with the sampler at 1.
const SMALL = ['--groups-per-step', '2', '--rollouts-per-group', '4', '--max-turns', '3', '--max-tokens', '48', '--eval-every', '1', '--val-rollouts', '1', '--temperature', '0.7'];

let work: string;
let scenarios: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-demo-split-'));
  scenarios = await bookshopScenarios(join(work, 'scenarios'), 6, 2);
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

/** `npm run demo -- ARGS -- SMALL` as a child process, with its own TMPDIR; resolves with its exit code and stderr. */
function demo(args: string[], tmp: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(REPO_ROOT, 'scripts', 'demo.ts'),
      '--max-steps', '1', '--runs-dir', join(work, 'runs'), '--scenarios', scenarios, ...args, '--', ...SMALL], {
      cwd: REPO_ROOT, env: { ...process.env, TMPDIR: tmp }, stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

const readJsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

describe('npm run demo -- --split', () => {
  it('trains through a served model as the in-process demo does, and cleans up', async () => {
    const tmp = join(work, 'tmp');
    await mkdir(tmp);
    const split = await demo(['--split', '--run', 'split'], tmp);
    expect(split.code, split.stderr).toBe(0);
    expect(split.stderr).toMatch(/seed 1 took [\d.]+ s \(serve \+ train as two processes\)/);
    // The adapter folder is gone; the server is gone too (the demo waits for it to exit before it exits).
    expect((await readdir(tmp)).filter((f) => f.startsWith('mcprl-demo-adapters-'))).toEqual([]);
    const inProcess = await demo(['--run', 'in-process'], tmp);
    expect(inProcess.code, inProcess.stderr).toBe(0);

    const [a, b] = [await readJsonl(join(work, 'runs', 'split', 'metrics.jsonl')), await readJsonl(join(work, 'runs', 'in-process', 'metrics.jsonl'))];
    expect(a.map((m) => m.step)).toEqual([0, 1]);
    for (let i = 0; i < 2; i++) {
      for (const k of ['val_success', 'val_mean_reward', 'train_reward', 'train_success', 'sequences', 'trained_tokens', 'groups_dropped_zero_variance']) {
        expect(a[i][k], `step ${i}: ${k}`).toEqual(b[i][k]);
      }
    }
    // Every turn came with its ids and the sampler's own logprobs (temperature 0.7, constrained).
    expect(a[1].rollout_turns).toBeGreaterThan(0);
    expect(a[1]).toMatchObject({ retokenized_turns: 0, sampler_logprob_turns: a[1].rollout_turns, servers_alive: 1 });
    if (a[1].loss !== undefined) {
      expect(a[1].logprob_mismatch).toBeLessThan(1e-4);
      expect(Math.abs(a[1].loss - b[1].loss)).toBeLessThanOrEqual(1e-4 * Math.max(1, Math.abs(b[1].loss)));
      expect(Math.abs(a[1].mean_ratio - b[1].mean_ratio)).toBeLessThan(1e-4);
    }
    expect(a[1].loss, 'the step had no group with signal, so nothing was compared').toBeDefined();
  }, 300_000);
});
