/**
 * `mcprl train --rollout-url`: rollouts on `mcprl serve` processes (vLLM's dialect), training here.
 *
 * 1. Split vs in-process: `mcprl serve` (one child process) and `mcprl train --rollout-url` (another) on the
 *    bundled tiny model and the fixture server, 3 steps, against the same command without --rollout-url. Decoding
 *    on the CPU is deterministic and batch-invariant and the seeds are the same, so every sampled token, reward and
 *    validation figure must be identical. What may differ, and why: the split trainer's log π_old is its own full
 *    forward over the sequence (truncated importance sampling), the in-process one's the sampler's decode-time
 *    logprobs; the two paths sum in another order, so the ratio and loss differ in the float32 noise (tolerances
 *    below), and the logged mismatch |Δ logprob| is that noise.
 * 2. A pool of two `mcprl serve` processes, one killed (SIGKILL) right after it answered its first training
 *    request, observed through the pool's answer hook (no sleeps): the run completes on the other, with a warning.
 * 3. A server that returns no token ids (a pass-through proxy in front of `mcprl serve` drops every id field, as a
 *    server without vLLM's token-id fields would answer): the trainer re-tokenises every turn and says so per step.
 */
import { existsSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { writeScenarioSet, type Scenario } from '../src/scenarios/scenario.js';
import { trainConfigFrom } from '../src/train/config.js';
import { RunDir } from '../src/train/run-dir.js';
import { train } from '../src/mcp-rl/train.js';
import { bookshopTrainSignalFirst, mcprl } from './faults/cli.js';
import { listeningUrl, runCli } from './helpers/cli.js';
import { FIXTURE_SERVER_MAIN, fixtureStdioTarget, REPO_ROOT } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const SMALL = ['--groups-per-step', '2', '--rollouts-per-group', '2', '--max-turns', '3', '--max-tokens', '48', '--concurrency', '4', '--seed', '1'];

let work: string;
let scenarios: string;
let set: { train: Scenario[]; val: Scenario[] };
const servers: ChildProcessWithoutNullStreams[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-rollout-url-'));
  const all = await bookshopTrainSignalFirst();
  set = { train: all.train.slice(0, 6), val: all.val.slice(0, 3) };
  scenarios = join(work, 'scenarios');
  await writeScenarioSet(scenarios, set.train, set.val);
});

afterAll(async () => {
  for (const s of servers) if (s.exitCode === null && s.signalCode === null) s.kill('SIGKILL');
  if (work) await rm(work, { recursive: true, force: true });
});

/** The servers want a bearer token, as a user's would beyond loopback; train sends it (--rollout-api-key-env). */
const TOKEN = 'rollout-pool-token';
const AUTH = { authorization: `Bearer ${TOKEN}` };

async function serve(): Promise<{ child: ChildProcessWithoutNullStreams; url: string }> {
  const child = runCli(['serve', '--model', MODEL, '--port', '0', '--quiet'], { ...process.env, MCPRL_SERVE_TOKEN: TOKEN });
  servers.push(child);
  return { child, url: await listeningUrl(child) };
}

/** `mcprl train …` as a child process (test/faults/cli.ts); resolves with its exit code and output. */
function trainCli(run: string, extra: string[]) {
  return mcprl(['train', '--model', MODEL, '--scenarios', scenarios, '--run', run, '--runs-dir', join(work, 'runs'),
    '--max-steps', '3', '--eval-every', '3', '--patience', '10', ...SMALL, '--quiet', '--json', ...extra, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN],
  { env: { ...process.env, MCPRL_TEST_ROLLOUT_KEY: TOKEN } });
}

const readJsonl = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

/** One sample of a Prometheus text exposition, by name and labels (0 when absent). */
function sample(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe('mcprl train --rollout-url', () => {
  it('trains 3 steps on a served model as the in-process run does, loading and unloading an adapter each step', async () => {
    const { url } = await serve();
    const split = await trainCli('split', ['--rollout-url', url, '--adapter-dir', join(work, 'adapters'), '--rollout-api-key-env', 'MCPRL_TEST_ROLLOUT_KEY']);
    expect(split.code, split.stderr).toBe(0);
    const inProcess = await trainCli('in-process', []);
    expect(inProcess.code, inProcess.stderr).toBe(0);

    // The server loaded policy-step-0 … policy-step-3 and unloaded each one when the next replaced it (the last
    // when training ended): four of each, none left.
    const metrics = await (await fetch(url.replace(/\/v1$/, '/metrics'), { headers: AUTH })).text();
    expect(sample(metrics, 'mcprl_http_requests_total', '{route="/v1/load_lora_adapter",status="200"}')).toBe(4);
    expect(sample(metrics, 'mcprl_http_requests_total', '{route="/v1/unload_lora_adapter",status="200"}')).toBe(4);
    expect(sample(metrics, 'mcprl_lora_adapters', '')).toBe(0);
    expect(existsSync(join(work, 'adapters', 'policy-step-3'))).toBe(false);

    const a = await readJsonl(join(work, 'runs', 'split', 'metrics.jsonl'));
    const b = await readJsonl(join(work, 'runs', 'in-process', 'metrics.jsonl'));
    expect(a.map((m) => m.step)).toEqual([0, 1, 2, 3]);
    expect(b.map((m) => m.step)).toEqual([0, 1, 2, 3]);
    let trained = 0;
    for (let i = 0; i < a.length; i++) {
      const same = ['val_success', 'val_mean_reward', 'train_reward', 'reward_std', 'train_success', 'tool_call_validity', 'groups_dropped_zero_variance', 'sequences', 'trained_tokens', 'rollout_errors'];
      for (const k of same) expect(a[i][k], `step ${i}: ${k}`).toEqual(b[i][k]);
      if (i === 0) continue;
      // Every token id came from the server: nothing was re-tokenised, no server was lost.
      expect(a[i]).toMatchObject({ retokenized_turns: 0, servers_alive: 1, servers_dropped: 0, rollout_retries: 0 });
      expect(a[i].rollout_turns).toBeGreaterThan(0);
      if (a[i].loss === undefined) continue;
      trained++;
      // Float32 noise between the decode path and the trainer's full forward (see the module comment).
      expect(a[i].logprob_mismatch).toBeLessThan(1e-4);
      expect(a[i].tis_truncated).toBe(0);
      expect(Math.abs(a[i].loss - b[i].loss)).toBeLessThanOrEqual(1e-4 * Math.max(1, Math.abs(b[i].loss)));
      expect(Math.abs(a[i].mean_ratio - b[i].mean_ratio)).toBeLessThan(1e-4);
      expect(Math.abs(a[i].grad_norm - b[i].grad_norm)).toBeLessThanOrEqual(1e-3 * Math.max(1e-3, b[i].grad_norm));
    }
    expect(trained).toBeGreaterThan(0); // at least one step had a group with signal, so training was compared
    // The same tokens were sampled, turn by turn.
    for (const step of [1, 2, 3]) {
      const ids = async (run: string) => (await readJsonl(join(work, 'runs', run, 'trajectories', `step-000${step}.jsonl`)))
        .map((t) => t.messages.filter((m: { role: string }) => m.role === 'assistant').map((m: { mcprl: { token_ids: number[] } }) => m.mcprl.token_ids));
      expect(await ids('split')).toEqual(await ids('in-process'));
    }
  }, 600_000);

  it('re-tokenises the turns of a server that returns no token ids, and counts them', async () => {
    const { url } = await serve();
    const upstream = new URL(url);
    // Chat completions come back without token_ids, mcprl_token_ids and prompt_token_ids, with their logprob entries
    // named by their text (return_tokens_as_token_ids ignored); everything else passes through unchanged.
    const proxy = createServer((req, res) => {
      req.pipe(request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
        const chunks: Buffer[] = [];
        up.on('data', (d: Buffer) => chunks.push(d));
        up.on('end', () => {
          let body = Buffer.concat(chunks);
          if (req.url!.endsWith('/chat/completions') && up.statusCode === 200) {
            const c = JSON.parse(body.toString('utf8'));
            delete c.prompt_token_ids;
            for (const ch of c.choices) {
              delete ch.token_ids;
              delete ch.mcprl_token_ids;
              for (const e of ch.logprobs?.content ?? []) e.token = `t${e.token}`;
            }
            body = Buffer.from(JSON.stringify(c));
          }
          res.writeHead(up.statusCode!, { ...up.headers, 'content-length': String(body.length) });
          res.end(body);
        });
      }));
    });
    await new Promise<void>((done) => proxy.listen(0, '127.0.0.1', done));
    try {
      const config = trainConfigFrom({ maxSteps: 1, evalEvery: 1, patience: 10, groupsPerStep: 2, rolloutsPerGroup: 2, maxTurns: 3, maxTokens: 48, concurrency: 4, seed: 1 }, { model: MODEL, target: 'fixture' });
      const runDir = new RunDir(join(work, 'runs', 'no-ids'));
      const result = await train({
        run: runDir, config, target: fixtureStdioTarget(), scenarios: set, log: () => undefined,
        rollout: { urls: [`http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`], adapterDir: join(work, 'no-ids-adapters'), validate: false, apiKey: TOKEN },
      });
      expect(result.state).toMatchObject({ step: 1, stopped: 'max_steps' });
      const [, m] = await readJsonl(runDir.path('metrics.jsonl'));
      expect(m.rollout_turns).toBeGreaterThan(0);
      expect(m.retokenized_turns).toBe(m.rollout_turns);
      expect(m.token_ids_differ).toBeGreaterThanOrEqual(0);
      expect(m.token_ids_differ).toBeLessThanOrEqual(m.rollout_turns);
      // The trajectories keep no sampled ids: the turns were trained from their re-tokenised text.
      for (const t of await readJsonl(runDir.trajectories(1)))
        for (const msg of t.messages) if (msg.role === 'assistant') expect(msg.mcprl?.token_ids).toBeUndefined();
    } finally {
      await new Promise<void>((done) => proxy.close(() => done()));
    }
  }, 600_000);

  it('completes on the other server of a pool of two when one is killed mid-step, with a warning', async () => {
    const [first, second] = [await serve(), await serve()];
    const lines: string[] = [];
    let killed = false;
    const config = trainConfigFrom({ maxSteps: 2, evalEvery: 2, patience: 10, groupsPerStep: 2, rolloutsPerGroup: 2, maxTurns: 3, maxTokens: 48, concurrency: 4, seed: 1 }, { model: MODEL, target: 'fixture' });
    const result = await train({
      run: new RunDir(join(work, 'runs', 'pool')), config, target: fixtureStdioTarget(), scenarios: set, log: (l) => lines.push(l),
      // Validation on the trainer's engine: every request the servers get belongs to a training step.
      rollout: { urls: [first.url, second.url], adapterDir: join(work, 'pool-adapters'), concurrencyPerServer: 2, validate: false, apiKey: TOKEN },
      rolloutEvents: {
        onAnswer: (url) => {
          if (url === second.url && !killed) {
            killed = true;
            second.child.kill('SIGKILL');
          }
        },
      },
    });
    expect(killed).toBe(true);
    expect(result.state).toMatchObject({ step: 2, stopped: 'max_steps' });
    expect(lines.filter((l) => l.includes(`rollout server ${second.url} dropped from the pool`))).toHaveLength(1);
    const metrics = await readJsonl(join(work, 'runs', 'pool', 'metrics.jsonl'));
    // The server died in step 1's gather; requests it could not answer went to the other, so no rollout failed. It
    // is dropped by the first request or adapter load that meets it dead (which one depends on how many turns the
    // rollouts still take after the kill, so only the end state is asserted).
    expect(metrics[1]).toMatchObject({ rollout_errors: 0, infra_failures: 0, retokenized_turns: 0 });
    expect(metrics[2]).toMatchObject({ servers_alive: 1, servers_dropped: 1, rollout_errors: 0, infra_failures: 0 });
  }, 600_000);
});
