/**
 * scripts/device-e2e.sh's dry run (issue 44 points 6 and 7): the device run's bundle — the CLI, the demo, the
 * fixture server and the helpers as single files, Node from the npm registry, the addon — is made here and runs the
 * device's whole sequence on the CPU through that Node and those files, at small sizes: the demo, `mcprl train` on
 * a random Qwen3-shaped bf16 folder, and `mcprl serve` answering the openai SDK. What the device run adds (the CUDA
 * checks, --device cuda, the 0.6B and 4B shapes) needs the GPU machine. The addon and the CUDA library are this
 * checkout's (MCPRL_E2E_REUSE_BUILD=1) rather than the portable build `--prepare` makes for the device, to keep the
 * test short; fetching Node needs the npm registry, which CI reaches.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from './helpers/servers.js';

interface Figure { figure: string; ok?: boolean; value?: number; unit?: string; mode?: string; commit?: string }

describe('scripts/device-e2e.sh --dry-run', () => {
  let work = '';
  afterAll(async () => { if (work) await rm(work, { recursive: true, force: true }); });

  it('bundles the run under the device call limit and runs its whole sequence through the bundled Node', async () => {
    work = await mkdtemp(path.join(tmpdir(), 'mcprl-e2e-test-'));
    const r = spawnSync('bash', [path.join(REPO_ROOT, 'scripts', 'device-e2e.sh'), '--dry-run'], {
      cwd: REPO_ROOT, encoding: 'utf8', maxBuffer: 64 << 20,
      env: { ...process.env, MCPRL_E2E_REUSE_BUILD: '1', MCPRL_E2E_WORK: path.join(work, 'w'), OUT: work },
    });
    expect(r.status, `${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`).toBe(0);
    const bundle = JSON.parse(r.stdout.split('\n').find((l) => l.includes('"device-e2e.bundle"'))!) as Figure & { limit_bytes: number };
    expect(bundle.unit).toBe('B');
    expect(bundle.value).toBeLessThanOrEqual(bundle.limit_bytes);
    for (const f of ['mcprl.mjs', 'scripts/demo.mjs', 'dist/fixtures/server/main.js', 'client.mjs', 'node.xz', 'build/Release/mcprl_native.node']) {
      expect(existsSync(path.join(REPO_ROOT, '.device', f)), f).toBe(true);
    }

    const figures = readFileSync(path.join(work, 'device-e2e.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Figure);
    const byName = new Map(figures.map((f) => [f.figure, f]));
    for (const f of figures) {
      expect(f.mode, f.figure).toBe('dry');
      expect(f.commit, f.figure).toMatch(/^[0-9a-f]{7,}/);
      if (f.value !== undefined) expect(f.unit, `${f.figure} has a unit`).toBeTruthy();
    }
    expect(byName.get('e2e.demo.cpu.steps')?.value).toBe(2);
    expect(byName.get('e2e.train.tiny.steps')?.value).toBe(1);
    expect(byName.get('e2e.train.tiny.step_train_s')?.unit).toBe('s');
    expect(byName.get('e2e.serve.stream')?.ok).toBe(true);
    expect(byName.get('e2e.serve.tool_call')?.ok).toBe(true);
    const summary = figures.at(-1)!;
    expect(summary.figure).toBe('device-e2e');
    expect(summary.ok).toBe(true);
  }, 20 * 60_000);
});
