/**
 * OpenTelemetry traces of a training run, received by an OTLP/HTTP collector in this process (JSON export): one
 * span per step, per rollout, per model call and per tool call, nested in that order, with the scenario id, tool
 * name, tokens and reward as attributes. And nothing at all when tracing is off.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadScenarioSet } from '../src/scenarios/scenario.js';
import { trainConfigFrom } from '../src/train/config.js';
import { RunDir } from '../src/train/run-dir.js';
import { train } from '../src/mcp-rl/train.js';
import { startOtlpTracing, startSpan, tracingOn } from '../src/util/tracing.js';
import { fixtureStdioTarget, REPO_ROOT } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');

interface OtlpValue { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean }
interface OtlpSpan { name: string; traceId: string; spanId: string; parentSpanId?: string; attributes?: { key: string; value: OtlpValue }[] }
interface Received { name: string; id: string; parent: string | undefined; trace: string; attrs: Record<string, string | number | boolean> }

let work: string;
let collector: Server;
let url: string;
const bodies: { path: string; type: string; body: string }[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-traces-'));
  collector = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      bodies.push({ path: req.url ?? '', type: String(req.headers['content-type']), body });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
});

afterAll(async () => {
  collector?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

function spans(): Received[] {
  const value = (v: OtlpValue) => v.stringValue ?? v.boolValue ?? v.doubleValue ?? Number(v.intValue);
  return bodies.flatMap((b) => (JSON.parse(b.body).resourceSpans as { scopeSpans: { spans: OtlpSpan[] }[] }[]).flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)))
    .map((s) => ({ name: s.name, id: s.spanId, parent: s.parentSpanId || undefined, trace: s.traceId, attrs: Object.fromEntries((s.attributes ?? []).map((a) => [a.key, value(a.value)])) }));
}

describe('OpenTelemetry traces', () => {
  it('are off by default: every span is one shared no-op', () => {
    expect(tracingOn()).toBe(false);
    expect(startSpan('a')).toBe(startSpan('b'));
  });

  it('export a span per step, rollout, model call and tool call of a training run, nested, with their attributes', async () => {
    const all = await loadScenarioSet(join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
    const tracing = await startOtlpTracing({ endpoint: url });
    try {
      const config = trainConfigFrom({ maxSteps: 1, evalEvery: 1, groupsPerStep: 2, rolloutsPerGroup: 2, maxTurns: 3, maxTokens: 48, concurrency: 4, seed: 1 }, { model: MODEL, target: 'fixture' });
      await train({ run: new RunDir(join(work, 'run')), config, target: fixtureStdioTarget(), scenarios: { train: all.train.slice(0, 4), val: all.val.slice(0, 2) }, log: () => undefined });
    } finally {
      await tracing.shutdown();
    }
    expect(tracingOn()).toBe(false);
    expect(bodies.length).toBeGreaterThan(0);
    for (const b of bodies) expect(b).toMatchObject({ path: '/v1/traces', type: expect.stringMatching(/^application\/json/) });

    const got = spans();
    const byId = new Map(got.map((s) => [s.id, s]));
    const named = (n: string) => got.filter((s) => s.name === n);
    const steps = named('mcprl.train.step');
    expect(steps.map((s) => s.attrs['mcprl.step']).sort()).toEqual([0, 1]);
    const step1 = steps.find((s) => s.attrs['mcprl.step'] === 1)!;
    expect(typeof step1.attrs['mcprl.train_reward']).toBe('number');

    // Step 0 validates 2 scenarios once; step 1 gathers 2 groups of 2 and validates 2: 8 rollouts, each under its step.
    const rollouts = named('mcprl.rollout');
    expect(rollouts).toHaveLength(8);
    for (const r of rollouts) {
      expect(steps.map((s) => s.id)).toContain(r.parent);
      expect(typeof r.attrs['mcprl.scenario_id']).toBe('string');
      expect(typeof r.attrs['mcprl.reward']).toBe('number');
      expect(r.attrs['mcprl.turns']).toBeGreaterThan(0);
    }
    expect(rollouts.filter((r) => r.parent === step1.id)).toHaveLength(6);

    const calls = named('mcprl.model_call');
    expect(calls.length).toBe(rollouts.reduce((a, r) => a + (r.attrs['mcprl.turns'] as number), 0));
    for (const c of calls) {
      const parent = byId.get(c.parent!)!;
      expect(parent.name).toBe('mcprl.rollout');
      expect(c.attrs['mcprl.scenario_id']).toBe(parent.attrs['mcprl.scenario_id']);
      expect(c.attrs['gen_ai.usage.output_tokens']).toBeGreaterThan(0);
    }
    const tools = named('mcprl.tool_call');
    expect(tools.length).toBeGreaterThan(0);
    for (const t of tools) {
      expect(byId.get(t.parent!)!.name).toBe('mcprl.rollout');
      expect(typeof t.attrs['mcprl.tool']).toBe('string');
      expect(typeof t.attrs['mcprl.tool_error']).toBe('boolean');
    }
    // A rollout's output tokens are its model calls' together.
    for (const r of rollouts) {
      const mine = calls.filter((c) => c.parent === r.id);
      expect(r.attrs['gen_ai.usage.output_tokens']).toBe(mine.reduce((a, c) => a + (c.attrs['gen_ai.usage.output_tokens'] as number), 0));
    }
  }, 300_000);
});
