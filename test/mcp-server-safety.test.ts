/**
 * `mcprl mcp` safety with the official SDK client: workspace confinement (.., absolute paths, symbolic links),
 * bad arguments as isError results while the server keeps serving, secrets kept out of results, the operator's
 * destructive-tool policy, and the HTTP transport's bearer token and DNS-rebinding checks.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatCoverage } from '../src/scenarios/coverage.js';
import { formatRephrasing } from '../src/scenarios/rephrase.js';
import { loadScenarioSet } from '../src/scenarios/scenario.js';
import { ScenarioSummarySchema } from '../src/scenarios/scenario-set.js';
import { chatReply, startOpenAIDouble, type RecordedRequest } from './doubles/openai-double.js';
import { REPO_ROOT, startFixtureHttp, type RunningHttpServer } from './helpers/servers.js';
import { call, FIXTURE_TARGET, httpClient, mcpArgs, rawInitialize, startMcprlHttp, stdioClient } from './mcp-server-helpers.js';
import { fault } from './faults/fault-table.js';

const base = mkdtempSync(path.join(tmpdir(), 'mcprl-mcp-safety-'));
const ws = path.join(base, 'ws');
const outside = path.join(base, 'outside');

beforeAll(() => {
  // Outside the workspace: a scenario set and a complete-looking run, reachable only through symbolic links.
  mkdirSync(path.join(outside, 'run'), { recursive: true });
  mkdirSync(path.join(ws, 'fake-model'), { recursive: true });
  const scenario = JSON.stringify({ id: 's1', task: 'Find book bk-001.', difficulty: 1, source: 'schema' });
  writeFileSync(path.join(outside, 'val.jsonl'), scenario + '\n');
  writeFileSync(path.join(outside, 'train.jsonl'), scenario + '\n');
  writeFileSync(path.join(outside, 'run', 'config.json'), '{"model":"x","target":"y","reward":"checks"}');
  writeFileSync(path.join(ws, 'fake-model', 'config.json'), '{}');
  symlinkSync(outside, path.join(ws, 'escape'));
  symlinkSync(path.join(outside, 'run'), path.join(ws, 'linkrun'));
});

afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('mcprl mcp over stdio: confinement, bad arguments, secrets, policy', () => {
  let client: Client;
  beforeAll(async () => {
    client = (await stdioClient(['--workspace', ws])).client;
  });
  afterAll(async () => client?.close());

  it('refuses paths that leave the workspace, by .., absolute path or symbolic link', async () => {
    const cases: [string, Record<string, unknown>, RegExp][] = [
      ['training_status', { run: '../outside/run' }, /not allowed/],
      ['training_status', { run: 'linkrun' }, /symbolic link/],
      ['start_training', { target: FIXTURE_TARGET, model: '../outside', scenarios: 'x' }, /outside the workspace/],
      ['start_training', { target: FIXTURE_TARGET, model: '/etc', scenarios: 'x' }, /outside the workspace/],
      ['start_training', { target: FIXTURE_TARGET, model: 'fake-model', scenarios: '../outside' }, /outside the workspace/],
      ['start_training', { target: FIXTURE_TARGET, model: 'fake-model', scenarios: 'escape' }, /symbolic link/],
      ['start_training', { target: FIXTURE_TARGET, model: 'fake-model', run: '../../tmp/x', scenarios: 'escape' }, /not allowed/],
      ['evaluate', { target: FIXTURE_TARGET, model: 'fake-model', scenarios: 'escape/val.jsonl' }, /symbolic link/],
      ['evaluate', { target: FIXTURE_TARGET, model: 'fake-model', adapter: '/tmp', scenarios: 'x' }, /outside the workspace/],
      ['generate_scenarios', { target: FIXTURE_TARGET, offline: true, name: '../evil' }, /not allowed/],
      ['inspect_server', { target: { ...FIXTURE_TARGET, cwd: '/' } }, /outside the workspace/],
      ['export_adapter', { run: '..', format: 'peft' }, /not allowed/],
    ];
    for (const [tool, args, why] of cases) {
      const r = await call(client, tool, args);
      expect(r.isError, `${tool} ${JSON.stringify(args)}: ${r.text}`).toBe(true);
      expect(r.text, `${tool} ${JSON.stringify(args)}`).toMatch(why);
      // The refusal names the argument, never the real location outside.
      expect(r.text).not.toContain(outside);
    }
    await expect(client.readResource({ uri: 'mcprl://runs/linkrun/config.json' })).rejects.toThrow(/symbolic link/);
    await expect(client.readResource({ uri: 'mcprl://runs/..%2Foutside%2Frun/config.json' })).rejects.toThrow();
    fault('path traversal in `mcprl mcp` arguments (.., absolute, symbolic link)', 'refused naming the argument', `${cases.length} arguments and 2 resources refused; nothing outside named`);
  });

  it('answers bad arguments with isError and keeps serving', async () => {
    const missing = await call(client, 'start_training', { model: 'fake-model' });
    expect(missing.isError).toBe(true);
    expect(missing.text).toMatch(/target/);
    const both = await call(client, 'inspect_server', { target: { url: 'http://127.0.0.1:1/mcp', command: 'node' } });
    expect(both).toMatchObject({ isError: true });
    expect(both.text).toMatch(/exactly one of url or command/);
    const scheme = await call(client, 'inspect_server', { target: { url: 'file:///etc/passwd' } });
    expect(scheme.isError).toBe(true);
    const noRun = await call(client, 'training_status', { run: 'nope' });
    expect(noRun.isError).toBe(true);
    expect(noRun.text).toMatch(/no run named "nope"/);
    const noScenarios = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'fake-model' });
    expect(noScenarios.text).toMatch(/give scenarios/);
    const noJudge = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'fake-model', offline: true, reward: 'ruler' });
    expect(noJudge.isError).toBe(true);
    expect(noJudge.text).toMatch(/reward ruler needs a judge: add judge/);
    // start_training's options are the training settings schema's: an unknown value or key is refused.
    const badLoss = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'fake-model', offline: true, options: { loss: 'ppo' } });
    expect(badLoss.isError).toBe(true);
    expect(badLoss.text).toMatch(/loss/);
    const typo = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'fake-model', offline: true, options: { learning_rate: 0.1 } });
    expect(typo.isError).toBe(true);
    expect(typo.text).toMatch(/learning_rate/);
    const deadServer = await call(client, 'inspect_server', { target: { command: process.execPath, args: ['-e', 'process.exit(3)'] } });
    expect(deadServer.isError).toBe(true);
    // Still serving.
    expect((await client.listTools()).tools.length).toBeGreaterThan(5);
  });

  it("advertises start_training's options as the training settings, with their defaults", async () => {
    const tool = (await client.listTools()).tools.find((t) => t.name === 'start_training')!;
    const options = (tool.inputSchema.properties as Record<string, { properties: Record<string, { default?: unknown; description?: string }> }>).options;
    expect(Object.keys(options.properties)).toEqual(expect.arrayContaining(['lr', 'rollouts_per_group', 'loss', 'max_steps', 'val_temperature', 'targets']));
    expect(options.properties.lr).toMatchObject({ default: 0.0005, description: 'AdamW learning rate' });
    expect(options.properties.loss).toMatchObject({ default: 'grpo', enum: ['grpo', 'dapo', 'dr_grpo', 'cispo', 'gspo'] });
  });

  it('reports a run whose training process fails as failed, with the reason from its progress events', async () => {
    // The call checks the target and the scenarios; the model folder (no tokenizer, no weights) fails only in the worker.
    mkdirSync(path.join(ws, 'scenarios', 'overlap'), { recursive: true });
    writeFileSync(path.join(ws, 'scenarios', 'overlap', 'train.jsonl'), JSON.stringify({ id: 's1', task: 'Find book bk-001.', difficulty: 1, source: 'schema' }) + '\n');
    writeFileSync(path.join(ws, 'scenarios', 'overlap', 'val.jsonl'), JSON.stringify({ id: 's2', task: 'How many orders has the shop taken?', difficulty: 2, source: 'schema' }) + '\n');
    const s = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'fake-model', run: 'doomed', scenarios: 'scenarios/overlap' });
    expect(s.isError, s.text).toBe(false);
    let status: Record<string, any> = {};
    for (let i = 0; i < 10 && status.status !== 'failed'; i++) status = (await call(client, 'training_status', { run: 'doomed', wait: true, timeout_s: 20 })).data;
    expect(status).toMatchObject({ run: 'doomed', status: 'failed', phase: 'done', step: null });
    expect(status.error).toMatch(/^TOKENIZER_NOT_FOUND: .*fake-model/);
    // The worker read its job from the run folder: the settings are there, the target's secrets are not.
    const job = JSON.parse(readFileSync(path.join(ws, 'doomed', 'job-config.json'), 'utf8'));
    expect(job.config).toMatchObject({ model: path.join(realpathSync(ws), 'fake-model'), reward: 'checks', lr: 0.0005 });
    expect(job.scenarios.dir).toBe(path.join(realpathSync(ws), 'scenarios', 'overlap'));
    // A name that is taken cannot be started again.
    const again = await call(client, 'start_training', { target: FIXTURE_TARGET, model: 'fake-model', run: 'doomed', scenarios: 'scenarios/overlap' });
    expect(again.isError).toBe(true);
    expect(again.text).toMatch(/already exists/);
  });

  it('generates an offline scenario set into the workspace, and will not overwrite it', async () => {
    const r = await call(client, 'generate_scenarios', { target: FIXTURE_TARGET, offline: true, count: 6, name: 'gen', seed: 3 });
    expect(r.isError, r.text).toBe(false);
    expect(r.data.path).toBe('scenarios/gen');
    expect(r.data.train + r.data.val).toBe(r.data.summary.total);
    expect(r.data.val).toBeGreaterThan(0);
    // The coverage report comes as data, and the text is rendered from it.
    const coverage = ScenarioSummarySchema.parse(r.data.summary).coverage;
    expect(coverage.find((t) => t.tool === 'place_order')).toMatchObject({ scenarios: 0, reason: 'writes_state' });
    expect(coverage.reduce((n, t) => n + t.scenarios, 0)).toBeGreaterThanOrEqual(r.data.summary.total);
    expect(r.text).toContain(formatCoverage(coverage).join('\n'));
    const lines = (f: string) => readFileSync(path.join(ws, 'scenarios', 'gen', f), 'utf8').trim().split('\n').length;
    expect([lines('train.jsonl'), lines('val.jsonl')]).toEqual([r.data.train, r.data.val]);
    const again = await call(client, 'generate_scenarios', { target: FIXTURE_TARGET, offline: true, count: 6, name: 'gen' });
    expect(again.isError).toBe(true);
    expect(again.text).toMatch(/already exists/);
    const noGenerator = await call(client, 'generate_scenarios', { target: FIXTURE_TARGET, name: 'gen2' });
    expect(noGenerator.text).toMatch(/offline: true, or generator/);
  });

  it('rewords an offline set with a generator, keeping its checks, under the same API-key policy', async () => {
    // The OpenAI double stands in for the remote LLM (none can run here); the mcprl server and the bookshop are real.
    const sent = (req: RecordedRequest): { id: string; task: string }[] => JSON.parse(req.body.messages[1].content).tasks;
    const llm = await startOpenAIDouble([], {
      // Each task reworded with a prefix, but the first of each request names a tool: refused, it keeps its wording.
      fallback: (req) => chatReply(JSON.stringify({ tasks: sent(req).map(({ id, task }, i) => ({ id, task: i === 0 ? `Use get_book: ${task}` : `Quick question: ${task}` })) })),
    });
    const granted = (await stdioClient(['--workspace', ws, '--allow-key-env', `REWORD_KEY=${llm.baseURL}`], { REWORD_KEY: 'reword-secret-44' })).client;
    try {
      const args = { target: FIXTURE_TARGET, offline: true, count: 6, seed: 3 };
      const r = await call(granted, 'generate_scenarios', { ...args, name: 'reworded', generator: { model: 'rewriter', base_url: llm.baseURL, api_key_env: 'REWORD_KEY' } });
      expect(r.isError, r.text).toBe(false);
      const rephrasing = ScenarioSummarySchema.parse(r.data.summary).rephrasing!;
      expect(rephrasing).toEqual({ model: 'rewriter', kept: r.data.summary.total - 1, refused: 1, refusedBy: { names_tool: 1 } });
      expect(r.text).toContain(`rephrased ${formatRephrasing(rephrasing)}`);
      expect(llm.requests[0].body.model).toBe('rewriter');
      expect(llm.requests[0].headers.authorization).toBe('Bearer reword-secret-44');
      expect(JSON.stringify(r.result)).not.toContain('reword-secret-44');
      // The same seed without a generator: the same tasks in their generated words, with the same checks.
      const plain = await call(granted, 'generate_scenarios', { ...args, name: 'plain' });
      expect(plain.data.summary).not.toHaveProperty('rephrasing');
      const load = async (name: string) => {
        const set = await loadScenarioSet(path.join(ws, 'scenarios', name));
        return new Map([...set.train, ...set.val].map((sc) => [sc.id, sc]));
      };
      const [reworded, generated] = await Promise.all([load('reworded'), load('plain')]);
      expect([...reworded.keys()].sort()).toEqual([...generated.keys()].sort());
      for (const [id, sc] of reworded) {
        expect([`Quick question: ${generated.get(id)!.task}`, generated.get(id)!.task]).toContain(sc.task);
        expect(sc.checks).toEqual(generated.get(id)!.checks);
      }
      expect([...reworded.values()].filter((sc) => sc.task.startsWith('Quick question: '))).toHaveLength(rephrasing.kept);
      // A variable not granted for that URL is refused before anything is generated.
      const refused = await call(granted, 'generate_scenarios', { ...args, name: 'other', generator: { model: 'rewriter', base_url: 'http://127.0.0.1:9/v1', api_key_env: 'REWORD_KEY' } });
      expect(refused.isError).toBe(true);
      expect(refused.text).toMatch(/REWORD_KEY may be sent only to/);
    } finally {
      await granted.close();
      await llm.close();
    }
  }, 120_000);

  it('uses header and env values of targets but never echoes them', async () => {
    const fixture: RunningHttpServer = await startFixtureHttp();
    try {
      const r = await call(client, 'inspect_server', { target: { url: fixture.url, headers: { Authorization: 'Bearer hdr-secret-41' } } });
      expect(r.isError, r.text).toBe(false);
      expect(JSON.stringify(r.result)).not.toContain('hdr-secret-41');
    } finally {
      await fixture.stop();
    }
    const down = await call(client, 'inspect_server', { target: { url: 'http://127.0.0.1:1/mcp', headers: { 'X-Api-Key': 'hdr-secret-42' } } });
    expect(down.isError).toBe(true);
    expect(JSON.stringify(down.result)).not.toContain('hdr-secret-42');
    const env = await call(client, 'inspect_server', { target: { command: process.execPath, args: ['-e', 'console.error(process.env.K ? "has K" : ""); process.exit(3)'], env: { K: 'env-secret-43' } } });
    expect(env.isError).toBe(true);
    expect(JSON.stringify(env.result)).not.toContain('env-secret-43');
  });

  it("applies the operator's destructive-tool policy, which tools cannot loosen", async () => {
    const r = await call(client, 'inspect_server', { target: FIXTURE_TARGET });
    const cancel = (r.data.tools as { name: string; allowed: boolean }[]).find((t) => t.name === 'cancel_order');
    expect(cancel?.allowed).toBe(false);
    const permissive = (await stdioClient(['--workspace', ws, '--allow-destructive'])).client;
    try {
      // Writes run only in isolation; the tool may ask for isolation (which only makes things safer).
      const shared = await call(permissive, 'inspect_server', { target: FIXTURE_TARGET });
      expect((shared.data.tools as { name: string; allowed: boolean }[]).find((t) => t.name === 'cancel_order')?.allowed).toBe(false);
      const p = await call(permissive, 'inspect_server', { target: { ...FIXTURE_TARGET, isolate: true, state_in_memory: true } });
      expect((p.data.tools as { name: string; allowed: boolean }[]).find((t) => t.name === 'cancel_order')?.allowed).toBe(true);
    } finally {
      await permissive.close();
    }
  });
});

describe('mcprl mcp over HTTP: bearer token and DNS-rebinding protection', () => {
  const TOKEN = 'right-token-7d3';
  let srv: RunningHttpServer;
  beforeAll(async () => {
    srv = await startMcprlHttp(['--workspace', ws, '--token-env', 'MCPRL_T'], { MCPRL_T: TOKEN });
  });
  afterAll(async () => srv?.stop());

  it('refuses requests without the right token and serves those with it', async () => {
    expect(await rawInitialize(srv.url, {})).toBe(401);
    expect(await rawInitialize(srv.url, { authorization: 'Bearer wrong-token' })).toBe(401);
    expect(await rawInitialize(srv.url, { authorization: TOKEN })).toBe(401);
    await expect(httpClient(srv.url, 'wrong-token')).rejects.toThrow();
    const client = await httpClient(srv.url, TOKEN);
    try {
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('start_training');
    } finally {
      await client.close();
    }
    expect(srv.stderr()).not.toContain(TOKEN);
    fault('`mcprl mcp` over HTTP without / with a wrong bearer token', '401; the token never logged', '401 ×3; served with the right token');
  });

  it('refuses a foreign Host or Origin even with the right token', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect(await rawInitialize(srv.url, { ...auth, host: 'evil.example' })).toBe(403);
    expect(await rawInitialize(srv.url, { ...auth, origin: 'http://evil.example' })).toBe(403);
    expect(await rawInitialize(srv.url, { ...auth, host: `localhost:${srv.port}`, origin: `http://localhost:${srv.port}` })).toBe(200);
    fault('foreign Host or Origin with the right token (DNS rebinding)', '403', '403 for both; own host and origin 200');
  });

  it('will not bind beyond loopback without a token', async () => {
    const child = spawn(process.execPath, mcpArgs(['--workspace', ws, '--http', '0', '--host', '0.0.0.0']), { cwd: REPO_ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    expect(err).toMatch(/--token/);
  });
});
