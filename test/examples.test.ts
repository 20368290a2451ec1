/**
 * Each example runs by its npm command, `npm run example -- <name>` (examples/run.ts), with small settings so that
 * it finishes in seconds on the tiny model: the same code path as the defaults, fewer steps and games. Every run
 * prints a progress line per step and ends with its line of figures.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './helpers/servers.js';

function example(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('npm', ['run', '--silent', 'example', '--', ...args], { cwd: REPO_ROOT, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

const NUM = String.raw`\d+\.\d{3}`;

/** The run's lines: its folder (from the first line), its step lines, and its last line. */
function lines(stdout: string): { dir: string; steps: string[]; last: string } {
  const all = stdout.trim().split('\n');
  const dir = /the backend's folder (.+)$/.exec(all[0])?.[1];
  expect(dir, all[0]).toBeDefined();
  return { dir: dir!, steps: all.filter((l) => /^step \d+\/\d+: /.test(l)), last: all[all.length - 1] };
}

describe('npm run example', () => {
  it('quickstart: a line per step, the figures, and the backend folder kept with --dir', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-example-test-'));
    try {
      const r = await example(['quickstart', '--steps', '2', '--dir', dir]);
      expect(r.code, r.stderr).toBe(0);
      const out = lines(r.stdout);
      expect(out.dir).toBe(dir);
      expect(out.steps).toHaveLength(2);
      for (const [i, l] of out.steps.entries()) expect(l).toMatch(new RegExp(`^step ${i + 1}/2: mean reward ${NUM} over 16 attempts, (trained on \\d of 2 groups|nothing trained)`));
      expect(out.last).toMatch(new RegExp(`^quickstart: mean reward ${NUM} at step 1, ${NUM} at step 2; [0-2] of 2 steps trained; \\d+ s$`));
      expect(readdirSync(path.join(dir, 'quickstart', 'numbers', 'checkpoints')).length).toBeGreaterThan(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const game of ['tic-tac-toe', 'higher-lower']) {
    it(`${game}: evaluation before and after, a line per step, the figures`, async () => {
      const r = await example([game, '--steps', '2', '--groups', '2', '--per-group', '4', '--eval-games', '4']);
      expect(r.code, r.stderr).toBe(0);
      const out = lines(r.stdout);
      expect(r.stdout).toMatch(new RegExp(`^before training: mean reward ${NUM} over 4 evaluation games`, 'm'));
      expect(r.stdout).toMatch(new RegExp(`^after training: mean reward ${NUM} over 4 evaluation games`, 'm'));
      expect(out.steps).toHaveLength(2);
      for (const l of out.steps) expect(l).toMatch(new RegExp(`mean reward ${NUM} over 8 attempts`));
      expect(out.last).toMatch(new RegExp(`^${game}: mean reward of 4 evaluation games ${NUM} before, ${NUM} after 2 steps \\([0-2] trained; seed 1\\); \\d+ s$`));
      // Without --dir the backend's folder is temporary.
      expect(existsSync(out.dir)).toBe(false);
    });
  }

  it('langgraph: a line per step and the figures', async () => {
    const r = await example(['langgraph', '--steps', '2', '--groups', '2', '--per-group', '4']);
    expect(r.code, r.stderr).toBe(0);
    const out = lines(r.stdout);
    expect(out.steps).toHaveLength(2);
    expect(out.last).toMatch(new RegExp(`^langgraph: mean reward ${NUM} at step 1, ${NUM} at step 2; [0-2] of 2 steps trained; \\d+ s$`));
  });

  it('refuses an unknown example and an option the example does not take, naming them', async () => {
    const unknown = await example(['chess']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('example: name one example: quickstart, tic-tac-toe, higher-lower, langgraph (got chess)');
    const option = await example(['quickstart', '--eval-games', '4']);
    expect(option.code).toBe(2);
    expect(option.stderr).toContain('example: --eval-games does not apply to quickstart');
    const unknownFlag = await example(['quickstart', '--evals', '4']);
    expect(unknownFlag.code).toBe(2);
    expect(unknownFlag.stderr).toContain("example: Unknown option '--evals'");
  });
});
