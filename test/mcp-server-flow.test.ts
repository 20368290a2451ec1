/**
 * `mcprl mcp` end to end, with the official SDK client: over stdio one client starts a two-step training run of
 * the tiny model on the fixture bookshop; a second client, over HTTP with a bearer token, watches it to the end
 * with progress notifications; then the trained agent performs a task, is evaluated, and is exported. A second
 * run is stopped while it runs.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { isAlive, REPO_ROOT, type RunningHttpServer } from './helpers/servers.js';
import { call, ENTRY, FIXTURE_TARGET, haveTinyModel, httpClient, startMcprlHttp, stdioClient, TINY_MODEL, TINY_SCENARIOS } from './mcp-server-helpers.js';

const TOKEN = 'flow-token-8c1d2e';
/** A value passed in a target's env: it must reach the server process but never a result or a run file. */
const SECRET = 'env-secret-value-5f0a9b';

/** True while pid exists and is not a zombie (an exited child its parent has not reaped yet). */
function running(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Every file under dir, recursively. */
function allFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = path.join(dir, n);
    return statSync(p).isDirectory() ? allFiles(p) : [p];
  });
}

describe('mcprl mcp: train, watch, run the agent, export', () => {
  let ws: string;
  let first: Client;
  let second: Client;
  let http: RunningHttpServer;
  const target = { ...FIXTURE_TARGET, env: { MCPRL_PROBE: SECRET } };

  beforeAll(async () => {
    if (!haveTinyModel) throw new Error(`the tiny model is missing at ${TINY_MODEL}: run npm run tiny-model (or set MCPRL_TEST_TINY_MODEL)`);
    ws = await mkdtemp(path.join(tmpdir(), 'mcprl-mcp-flow-'));
    // A small scenario set: two training scenarios, one validation scenario (disjoint, as the bundled sets are).
    const take = async (split: string, n: number) => (await readFile(path.join(TINY_SCENARIOS, `${split}.jsonl`), 'utf8')).split('\n').filter(Boolean).slice(0, n).join('\n') + '\n';
    await mkdir(path.join(ws, 'scenarios', 'small'), { recursive: true });
    await writeFile(path.join(ws, 'scenarios', 'small', 'train.jsonl'), await take('train', 2));
    await writeFile(path.join(ws, 'scenarios', 'small', 'val.jsonl'), await take('val', 1));
    const modelArgs = ['--workspace', ws, '--models', path.dirname(TINY_MODEL)];
    first = (await stdioClient(modelArgs)).client;
    http = await startMcprlHttp([...modelArgs, '--token-env', 'MCPRL_TEST_TOKEN', '--allow-commands'], { MCPRL_TEST_TOKEN: TOKEN });
    second = await httpClient(http.url, TOKEN);
  });

  afterAll(async () => {
    await first?.close();
    await second?.close();
    await http?.stop();
    // A run this file started must not outlive it.
    for (const run of ['flow', 'halt']) {
      const job = path.join(ws, run, 'job.json');
      if (existsSync(job)) {
        const { pid } = JSON.parse(readFileSync(job, 'utf8')) as { pid: number };
        if (isAlive(pid)) process.kill(-pid, 'SIGKILL');
      }
    }
    await rm(ws, { recursive: true, force: true });
  });

  it('advertises its tools with schemas and honest annotations', async () => {
    const { tools } = await first.listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    for (const n of ['inspect_server', 'generate_scenarios', 'start_training', 'training_status', 'stop_training', 'list_runs', 'evaluate', 'run_agent', 'export_adapter']) {
      expect(byName.get(n)?.outputSchema, n).toBeDefined();
    }
    expect(byName.get('training_status')!.annotations).toMatchObject({ readOnlyHint: true, openWorldHint: false });
    expect(byName.get('inspect_server')!.annotations).toMatchObject({ readOnlyHint: true, openWorldHint: true });
    expect(byName.get('start_training')!.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: false, openWorldHint: true });
    expect(byName.get('stop_training')!.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(byName.get('run_agent')!.annotations).toMatchObject({ readOnlyHint: false, openWorldHint: true });
  });

  it('inspects the fixture server, marking the destructive tool as refused by the default policy', async () => {
    const r = await call(first, 'inspect_server', { target });
    expect(r.isError, r.text).toBe(false);
    expect(r.data.server.name).toBe('mcprl-bookshop');
    const tools = new Map((r.data.tools as { name: string; access: string; allowed: boolean }[]).map((t) => [t.name, t]));
    expect(tools.get('get_book')).toMatchObject({ access: 'read-only', allowed: true });
    expect(tools.get('cancel_order')).toMatchObject({ access: 'destructive', allowed: false });
    // What would let a refused tool run is said in this server's terms: a tool argument, or the operator's option;
    // never a command line to rerun.
    expect(tools.get('restock')).toMatchObject({ access: 'write', allowed: false, remedy: expect.stringMatching(/target\.isolate: true/) });
    expect(tools.get('restock')).not.toMatchObject({ remedy: expect.stringMatching(/Rerun|--isolate/) });
    expect(tools.get('get_book')).not.toHaveProperty('remedy');
    const isolated = await call(first, 'inspect_server', { target: { ...target, isolate: true, state_in_memory: true } });
    const cancel = (isolated.data.tools as { name: string; allowed: boolean; remedy?: string }[]).find((t) => t.name === 'cancel_order');
    expect(cancel).toMatchObject({ allowed: false, remedy: expect.stringMatching(/starting mcprl mcp with --allow cancel_order/) });
    expect((r.data.catalog.tools as unknown[]).length).toBe(tools.size);
    expect(r.text).not.toContain(SECRET);
  });

  it('starts a two-step run at once; a second client over HTTP watches it to the end with progress', async () => {
    const started = await call(first, 'start_training', {
      target,
      model: path.basename(TINY_MODEL),
      run: 'flow',
      scenarios: 'scenarios/small',
      options: { max_steps: 2, eval_every: 1, groups_per_step: 2, rollouts_per_group: 2, max_turns: 4, max_tokens: 96, concurrency: 4 },
    });
    expect(started.isError, started.text).toBe(false);
    expect(started.data).toEqual({ run: 'flow', status: 'starting', run_dir: 'flow' });

    // The second client knows nothing but the name; it waits step by step until the run ends.
    const progress: { progress: number; total?: number; message?: string }[][] = [];
    const seenSteps: (number | null)[] = [];
    const seenProgress: { phase: string; step: number; done: number; total: number }[] = [];
    let status: Record<string, any> = {};
    for (let i = 0; i < 40; i++) {
      const mine: (typeof progress)[number] = [];
      progress.push(mine);
      const r = await call(second, 'training_status', { run: 'flow', wait: true, timeout_s: 30 }, {
        onprogress: (p) => mine.push(p),
        resetTimeoutOnProgress: true,
      });
      expect(r.isError, r.text).toBe(false);
      status = r.data;
      seenSteps.push(status.step);
      if (status.progress) seenProgress.push(status.progress);
      if (status.status !== 'running' && status.status !== 'starting') break;
    }
    expect(status, JSON.stringify(status)).toMatchObject({ run: 'flow', status: 'finished', phase: 'done', step: 2, max_steps: 2, stopped_reason: 'max_steps', report: 'flow/report.html', error: null });
    expect(status.latest_metrics.step).toBe(2);
    expect(typeof status.val_success_before).toBe('number');
    // Waiting returned step by step: the steps seen never go back, and the run was watched while it ran.
    const steps = seenSteps.filter((s): s is number => s !== null);
    expect(steps).toEqual([...steps].sort((a, b) => a - b));
    expect(steps.length).toBeGreaterThanOrEqual(2);
    // Each wait reported progress, strictly increasing within its request (as the spec requires per token).
    for (const mine of progress) {
      expect(mine.length).toBeGreaterThan(0);
      for (let i = 1; i < mine.length; i++) expect(mine[i].progress).toBeGreaterThan(mine[i - 1].progress);
    }
    const all = progress.flat();
    expect(all.every((p) => p.total === 2 || p.total === undefined)).toBe(true);
    expect(all[all.length - 1]).toMatchObject({ progress: 2, total: 2 });
    expect(all.some((p) => /running \((gather|score|train|checkpoint|validate)\)/.test(p.message ?? ''))).toBe(true);
    // The phase and counts come from the run's progress events: a step's phase with done of total units.
    expect(seenProgress.length).toBeGreaterThan(0);
    for (const p of seenProgress) {
      expect(['starting', 'gather', 'score', 'train', 'checkpoint', 'validate', 'report', 'done']).toContain(p.phase);
      expect(p.done).toBeLessThanOrEqual(p.total);
    }
    expect(status.progress).toBeNull();

    // The first client sees the same thing, and the run is listed.
    const again = await call(first, 'training_status', { run: 'flow' });
    expect(again.data.status).toBe('finished');
    const list = await call(first, 'list_runs', {});
    expect((list.data.runs as { run: string }[]).map((r) => r.run)).toEqual(['flow']);
  }, 180_000); // ~10 s here; the margin is for a loaded machine.

  it("serves the run's files as resources", async () => {
    const { resources } = await second.listResources();
    const uris = resources.map((r) => r.uri);
    expect(uris).toEqual(expect.arrayContaining(['mcprl://runs/flow/report.html', 'mcprl://runs/flow/metrics.jsonl', 'mcprl://runs/flow/config.json']));
    const metrics = await second.readResource({ uri: 'mcprl://runs/flow/metrics.jsonl' });
    const lines = (metrics.contents[0] as { text: string }).text.trim().split('\n').map((l) => JSON.parse(l) as { step: number });
    expect(lines.map((l) => l.step)).toEqual([0, 1, 2]);
    const report = await first.readResource({ uri: 'mcprl://runs/flow/report.html' });
    expect((report.contents[0] as { text: string }).text).toContain('<html');
  });

  it('runs the trained agent on a task and returns its answer with a compact trace', async () => {
    const r = await call(first, 'run_agent', { target, run: 'flow', checkpoint: 'latest', task: 'Can you check the book bk-030 and report its year?', max_turns: 4 });
    expect(r.isError, r.text).toBe(false);
    expect(r.data.agent).toContain('flow (latest checkpoint, step 2)');
    expect(r.data.turns).toBeGreaterThanOrEqual(1);
    expect(r.data.error).toBeNull();
    // Every call in the trace is a bookshop tool or complete_task, and each executed call has a result.
    const calls = (r.data.trace as { kind: string; name?: string }[]).filter((e) => e.kind === 'tool_call');
    expect(calls.length).toBe(r.data.tool_calls);
    expect(r.data.final_answer === null || typeof r.data.final_answer === 'string').toBe(true);
  });

  it("evaluates the run's adapter on its validation set", async () => {
    const r = await call(second, 'evaluate', { target, run: 'flow', checkpoint: 'latest', name: 'flow-val', max_turns: 4 });
    expect(r.isError, r.text).toBe(false);
    expect(r.data.summary).toMatchObject({ scenarios: 1, trajectories: 1, reward_mode: 'checks' });
    expect(r.data.files).toEqual({ trajectories: 'evals/flow-val/trajectories.jsonl', summary: 'evals/flow-val/summary.json' });
    expect(existsSync(path.join(ws, 'evals', 'flow-val', 'summary.json'))).toBe(true);
  });

  it('exports the adapter into the workspace as a PEFT folder', async () => {
    const r = await call(first, 'export_adapter', { run: 'flow', format: 'peft', checkpoint: 'latest' });
    expect(r.isError, r.text).toBe(false);
    expect(r.data).toMatchObject({ path: 'exports/flow-peft-latest', format: 'peft', step: 2 });
    const cfg = JSON.parse(await readFile(path.join(ws, 'exports', 'flow-peft-latest', 'adapter_config.json'), 'utf8')) as { peft_type: string };
    expect(cfg.peft_type).toBe('LORA');
    expect(existsSync(path.join(ws, 'exports', 'flow-peft-latest', 'adapter_model.safetensors'))).toBe(true);
    // Exporting to the same folder again is refused rather than overwriting it.
    const again = await call(first, 'export_adapter', { run: 'flow', format: 'peft', checkpoint: 'latest' });
    expect(again.isError).toBe(true);
    expect(again.text).toMatch(/already exists/);
  });

  it('stops a running run (SIGTERM to its process group) and reports it as stopped', async () => {
    const s = await call(second, 'start_training', {
      target, model: path.basename(TINY_MODEL), run: 'halt', scenarios: 'scenarios/small', options: { max_steps: 50, eval_every: 50 },
    });
    expect(s.isError, s.text).toBe(false);
    const { pid } = JSON.parse(await readFile(path.join(ws, 'halt', 'job.json'), 'utf8')) as { pid: number };
    expect(running(pid)).toBe(true);
    const r = await call(first, 'stop_training', { run: 'halt' });
    expect(r.isError, r.text).toBe(false);
    expect(r.data).toMatchObject({ run: 'halt', was_running: true });
    expect(r.data.status).toMatchObject({ status: 'stopped', phase: 'done' });
    // The HTTP server is the parent and reaps the process a moment later; until then it is a zombie, not running.
    expect(running(pid)).toBe(false);
    const twice = await call(second, 'stop_training', { run: 'halt' });
    expect(twice.data).toMatchObject({ was_running: false, signal: null });
  });

  it('sees a run started with `mcprl train` on the command line as running, and can stop it', async () => {
    const cli = spawn(process.execPath, ['--import', 'tsx', ENTRY, 'train', '--model', TINY_MODEL, '--scenarios', path.join(ws, 'scenarios', 'small'),
      '--run', 'cli', '--runs-dir', ws, '--max-steps', '50', '--eval-every', '50', '--quiet', '--', ...FIXTURE_TARGET.command.split(' '), ...FIXTURE_TARGET.args], { cwd: REPO_ROOT, stdio: 'ignore' });
    const exited = new Promise<number | null>((resolve) => cli.once('exit', (code) => resolve(code)));
    try {
      let status: Record<string, any> = {};
      // config.json appears once the scenarios are loaded; until then the run does not exist yet.
      for (let i = 0; i < 200 && status.status !== 'running' && status.status !== 'starting'; i++) {
        const r = await call(first, 'training_status', { run: 'cli' });
        if (!r.isError) status = r.data;
        else await new Promise((res) => setTimeout(res, 100));
      }
      expect(status.status).toMatch(/^(running|starting)$/);
      const r = await call(second, 'stop_training', { run: 'cli' });
      expect(r.data).toMatchObject({ run: 'cli', was_running: true });
      await exited;
      expect(cli.exitCode === null ? cli.signalCode : cli.exitCode).toMatch(/SIGTERM|SIGKILL/);
      expect((await call(first, 'training_status', { run: 'cli' })).data.status).toBe('incomplete');
    } finally {
      if (cli.exitCode === null && cli.signalCode === null) cli.kill('SIGKILL');
    }
  });

  it('keeps target secrets out of every run file', () => {
    for (const f of allFiles(ws)) {
      if (f.endsWith('.safetensors')) continue;
      expect(readFileSync(f, 'utf8').includes(SECRET), f).toBe(false);
    }
  });
});
