/**
 * Asynchronous rollouts (`--max-staleness N`): `mcprl serve` (a child process) and the trainer (this process, through
 * `train()` and its test-only asyncHooks) on the bundled tiny model and the fixture server.
 *
 * Which adapter samples what is decided by the test, not by timing: gathers may run two adapters behind the one that
 * trains them (asyncHooks.gatherAhead 2, one more than N = 1 allows, so that a group can go stale), and step 1's
 * adapter is published only once step 3's groups are gathered. So steps 1, 2 and 3 are all gathered, provably, by
 * the step-0 adapter: step 2's groups (trained by adapter 1) are one step stale and trained on, with truncated
 * importance sampling against a policy that really differs (mismatch far above the float32 noise of the synchronous
 * split, < 1e-4 in test/train-rollout-servers.test.ts); step 3's (trained by adapter 2) are two steps stale, past N:
 * discarded and gathered again on adapter 2, so that step trains on-policy (mismatch back at float noise).
 *
 * Then a run that dies after a step gathered ahead has trained, before it commits, and is resumed: that step is
 * gathered again. (An error thrown at the publish stands for the death here; kill -9 of the asynchronous loop at
 * exact points is test/faults/kill-9-async.test.ts.)
 *
 * And a run with --isolate that keeps OpenBLAS: it forks a fixture server per rollout while the engine trains on a
 * worker thread, which used to be able to hang in OpenBLAS's fork handler (native/kernels/gemm.cc, g_blas_fork). It must
 * complete, with OpenBLAS multiplying and every fork counted by the guard. Whether a fork meets a product in flight
 * is up to timing, so this test passes with the guard whatever the timing; that without it a run could hang is
 * shown by scripts/stress-blas-fork.ts, not here.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Scenario } from '../src/scenarios/scenario.js';
import { trainConfigFrom } from '../src/train/config.js';
import { RunDir } from '../src/train/run-dir.js';
import { train } from '../src/mcp-rl/train.js';
import { loadNative } from '../src/engine/native.js';
import { bookshopTrainSignalFirst } from './faults/cli.js';
import { listeningUrl, runCli } from './helpers/cli.js';
import { fixtureStdioTarget, REPO_ROOT } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const SETTINGS = { maxSteps: 3, evalEvery: 3, patience: 10, groupsPerStep: 3, rolloutsPerGroup: 4, maxTurns: 3, maxTokens: 48, concurrency: 4, seed: 1 };

let work: string;
let set: { train: Scenario[]; val: Scenario[] };
let server: ChildProcessWithoutNullStreams | undefined;
let serverUrl: Promise<string> | undefined;
/** The `mcprl serve` child the tests share, started by the first that needs it. */
function served(): Promise<string> {
  if (!serverUrl) {
    server = runCli(['serve', '--model', MODEL, '--port', '0', '--quiet']);
    serverUrl = listeningUrl(server);
  }
  return serverUrl;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-async-'));
  const all = await bookshopTrainSignalFirst();
  set = { train: all.train.slice(0, 6), val: all.val.slice(0, 3) };
});
afterAll(async () => {
  if (server && server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
  if (work) await rm(work, { recursive: true, force: true });
});

const readJsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

describe('asynchronous rollouts (--max-staleness)', () => {
  it('trains on groups gathered by an older adapter, with TIS against it, and regathers a group past N', async () => {
    const url = await served();
    let gatheredStep3!: () => void;
    const step3In = new Promise<void>((resolve) => (gatheredStep3 = resolve));
    const gathered: number[] = [];
    const config = trainConfigFrom({ ...SETTINGS, maxStaleness: 1 }, { model: MODEL, target: 'fixture' });
    const runDir = new RunDir(join(work, 'runs', 'async'));
    const result = await train({
      run: runDir, config, target: fixtureStdioTarget(), scenarios: set, log: () => undefined,
      rollout: { urls: [url], adapterDir: join(work, 'adapters') },
      asyncHooks: {
        gatherAhead: 2,
        onGathered: (step) => {
          gathered.push(step);
          if (step === 3) gatheredStep3();
        },
        beforePublish: async (step) => {
          if (step === 1) await step3In;
        },
      },
    });
    expect(result.state).toMatchObject({ step: 3, stopped: 'max_steps' });
    // Steps 1-3 were gathered ahead, one after the other, before adapter 1 existed; step 3 once more, later.
    expect(gathered).toEqual([1, 2, 3]);

    const m = await readJsonl(runDir.path('metrics.jsonl'));
    const steps = async (step: number) => (await readJsonl(runDir.trajectories(step))).filter((t) => t.metrics.turns > 0);
    // Every trajectory names the adapter that sampled it, as the server answered.
    for (const t of await steps(1)) expect(t).toMatchObject({ sampled_by: ['policy-step-0'], policy_step: 0 });
    for (const t of await steps(2)) expect(t).toMatchObject({ sampled_by: ['policy-step-0'], policy_step: 0 });
    for (const t of await steps(3)) expect(t).toMatchObject({ sampled_by: ['policy-step-2'], policy_step: 2 });
    // Validation of step 3 ran on step 3's own adapter.
    for (const t of await readJsonl(runDir.valTrajectories(3))) if (t.metrics.turns > 0) expect(t.sampled_by).toEqual(['policy-step-3']);

    const figures = JSON.stringify(m);
    expect(m[1].loss, `step 1 trained nothing, so adapter 1 would equal adapter 0: ${figures}`).toBeDefined();
    expect(m[1]).toMatchObject({ staleness_mean: 0, staleness_max: 0, groups_too_stale: 0 });
    expect(m[2]).toMatchObject({ staleness_mean: 1, staleness_max: 1, groups_too_stale: 0 });
    expect(m[3]).toMatchObject({ staleness_mean: 0, staleness_max: 0, groups_too_stale: 3 });
    for (const row of m.slice(1)) expect(row.staleness_max).toBeLessThanOrEqual(config.maxStaleness);
    // Step 1: the servers sampled with the adapter that trains (float noise only). Step 2: adapter 0's logprobs
    // against adapter 1's, so the importance weights move off 1.
    expect(m[1].logprob_mismatch).toBeLessThan(1e-4);
    expect(m[1].tis_weight_deviation).toBeLessThan(1e-4);
    expect(m[2].loss, `step 2 trained nothing: ${figures}`).toBeDefined();
    expect(m[2].logprob_mismatch).toBeGreaterThan(1e-3);
    expect(m[2].tis_weight_deviation).toBeGreaterThan(1e-3);
    if (m[3].loss !== undefined) expect(m[3].logprob_mismatch).toBeLessThan(1e-4);
  }, 600_000);

  it('resumes a run that died with a step gathered ahead: that step is gathered again, on the resumed adapter', async () => {
    const url = await served();
    const runDir = new RunDir(join(work, 'runs', 'died'));
    const config = trainConfigFrom({ ...SETTINGS, maxSteps: 2, evalEvery: 2, maxStaleness: 1 }, { model: MODEL, target: 'fixture' });
    const rollout = { urls: [url], adapterDir: join(work, 'died-adapters') };
    let gatheredStep2!: () => void;
    const step2In = new Promise<void>((resolve) => (gatheredStep2 = resolve));
    // Step 2 is gathered ahead by adapter 0; the run dies once step 2 has trained, before it commits (as a kill
    // there would leave it: step 1 committed, step 2's checkpoint not the run's).
    await expect(train({
      run: runDir, config, target: fixtureStdioTarget(), scenarios: set, log: () => undefined, rollout,
      asyncHooks: {
        onGathered: (step) => step === 2 && gatheredStep2(),
        beforePublish: async (step) => {
          if (step === 1) await step2In;
          if (step === 2) throw new Error('died before step 2 committed');
        },
      },
    })).rejects.toThrow('died before step 2 committed');
    expect((await runDir.readState())?.step).toBe(1);
    for (const t of await readJsonl(runDir.trajectories(2))) if (t.metrics.turns > 0) expect(t.policy_step).toBe(0);

    const resumed = await train({ run: runDir, config, target: fixtureStdioTarget(), scenarios: set, log: () => undefined, rollout, resume: true });
    expect(resumed.state).toMatchObject({ step: 2, stopped: 'max_steps' });
    const m = await readJsonl(runDir.path('metrics.jsonl'));
    expect(m.map((r) => r.step)).toEqual([0, 1, 2]);
    expect(m[2]).toMatchObject({ staleness_max: 0, groups_too_stale: 0 });
    for (const t of await readJsonl(runDir.trajectories(2))) if (t.metrics.turns > 0) expect(t).toMatchObject({ sampled_by: ['policy-step-1'], policy_step: 1 });
  }, 600_000);

  const blas = loadNative().info();
  it.skipIf(!blas.openblas || blas.portableGemm)('trains with OpenBLAS while --isolate forks a server per rollout, and completes', async () => {
    const url = await served();
    const native = loadNative();
    const before = native.info();
    const config = trainConfigFrom({ ...SETTINGS, groupsPerStep: 2, rolloutsPerGroup: 2, maxStaleness: 1 }, { model: MODEL, target: 'fixture' });
    const runDir = new RunDir(join(work, 'runs', 'isolated'));
    const result = await train({
      run: runDir, config, target: fixtureStdioTarget(), scenarios: set, log: () => undefined, isolation: { isolate: true, stateInMemory: true },
      rollout: { urls: [url], adapterDir: join(work, 'isolated-adapters') },
    });
    expect(result.state).toMatchObject({ step: 3, stopped: 'max_steps' });
    const after = native.info();
    // The run multiplied with OpenBLAS (no switch to the portable GEMM), and forked at least one server per rollout
    // of its 3 steps, each fork through the guard.
    expect(after.portableGemm).toBe(false);
    expect(after.blasCalls - before.blasCalls).toBeGreaterThan(0);
    const m = await readJsonl(runDir.path('metrics.jsonl'));
    expect(m.map((r) => r.step)).toEqual([0, 1, 2, 3]);
    expect(after.forks - before.forks).toBeGreaterThanOrEqual(3 * config.groupsPerStep * config.rolloutsPerGroup);
    expect(m.slice(1).some((r) => r.loss !== undefined), `nothing trained, so OpenBLAS never ran alongside a fork: ${JSON.stringify(m)}`).toBe(true);
  }, 600_000);

  it('refuses in-process rollouts with N ≥ 1, in one line', async () => {
    const config = trainConfigFrom({ ...SETTINGS, maxStaleness: 1 }, { model: MODEL, target: 'fixture' });
    await expect(train({ run: new RunDir(join(work, 'runs', 'in-process')), config, target: fixtureStdioTarget(), scenarios: set, log: () => undefined }))
      .rejects.toThrow(/^maxStaleness 1 \(--max-staleness\) needs rollout servers \(--rollout-url\): in-process, the engine cannot generate while it trains$/);
  });
});
