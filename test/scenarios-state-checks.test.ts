/**
 * State checks beyond written strings, sandbox placeholders and destructive write tasks, on the real servers (the
 * bookshop fixture, server-memory, server-filesystem from node_modules; stdio). For every server generation runs on,
 * a scripted oracle (the scenario's checked calls, then a summary quoting what the tools said) must pass every check,
 * and a do-nothing agent (no tool call, an empty answer) must score 0 on every scenario: the checks tell a real
 * change from an untouched server. The agents are scripted policies behind an OpenAI-compatible HTTP double (it
 * stands in for a remote model, which cannot run here).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OpenAIPolicy } from '../src/agent/policy.js';
import { rolloutGroups } from '../src/agent/rollout-groups.js';
import { connect, SafetyPolicy, targetUsesSandbox } from '../src/mcp/index.js';
import type { Target } from '../src/mcp/types.js';
import { scoreChecks } from '../src/ruler/checks.js';
import { generateOfflineScenarios, type OfflineResult } from '../src/scenarios/offline/index.js';
import { checkedCalls, type Scenario } from '../src/scenarios/scenario.js';
import type { OpenAIDouble } from './doubles/openai-double.js';
import { goodStrategy, scriptedStrategy, startPolicyDouble } from './doubles/policy-double.js';
import { everythingStdioTarget, filesystemTarget, fixtureStdioTarget, folderWithFiles, memoryTarget, SEEDED_MEMORY } from './helpers/servers.js';

const doubles: OpenAIDouble[] = [];
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
});

async function policyFor(strategy: Parameters<typeof startPolicyDouble>[0]): Promise<OpenAIPolicy> {
  const double = await startPolicyDouble(strategy);
  doubles.push(double);
  return new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
}

interface Setup {
  target: Target;
  sandboxFrom?: string;
  safety?: SafetyPolicy;
  isolate: boolean;
}

async function generate(s: Setup, count: number, seed = 1): Promise<OfflineResult> {
  // Every server here without a {sandbox} keeps its state in memory (the fixture, server-everything).
  const opts = { sandboxFrom: s.sandboxFrom, stateInMemory: !targetUsesSandbox(s.target), ...(s.safety ? { policy: s.safety } : {}) };
  const session = await connect(s.target, opts);
  try {
    return await generateOfflineScenarios(session, {
      count, seed, maxAttempts: count * 6,
      ...(s.isolate ? { isolatedServer: () => connect(s.target, { ...opts, isolated: true }) } : {}),
    });
  } finally {
    await session.close();
  }
}

/** Scores of the oracle and of the do-nothing agent, per scenario (fractions of checks passed). */
async function oracleAndIdle(s: Setup, scenarios: Scenario[]): Promise<{ oracle: number[]; idle: number[]; states: string[] }> {
  const run = async (policy: OpenAIPolicy) =>
    rolloutGroups({
      policy, target: s.target, scenarios, rolloutsPerGroup: 1, concurrency: 2, isolate: s.isolate, sandboxFrom: s.sandboxFrom, stateInMemory: !targetUsesSandbox(s.target),
      ...(s.safety ? { policyForSafety: s.safety } : {}),
    });
  const good = await run(await policyFor(goodStrategy(scenarios)));
  const idle = await run(await policyFor(scriptedStrategy([], '')));
  return {
    oracle: scenarios.map((sc, i) => scoreChecks(good[i][0], sc).fraction),
    idle: scenarios.map((sc, i) => scoreChecks(idle[i][0], sc).fraction),
    states: good.map((g) => JSON.stringify({ state: g[0].state, error: g[0].error, logs: g[0].logs.slice(-3) })),
  };
}

const kinds = (s: Scenario) => (s.checks ?? []).map((c) => c.kind);
const stateKind = (s: Scenario) => kinds(s).find((k) => k.startsWith('state_'));
const calledTool = (s: Scenario): string | undefined => {
  return checkedCalls(s.checks ?? [])[0]?.tool;
};

function expectOracleAllIdleNone(r: { oracle: number[]; idle: number[]; states: string[] }, scenarios: Scenario[]): void {
  scenarios.forEach((s, i) => {
    expect(r.oracle[i], `${s.task}\n${JSON.stringify(s.checks)}\n${r.states[i]}`).toBe(1);
    expect(r.idle[i], s.task).toBe(0);
  });
}

function memoryFolder(seeded: boolean): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-memory-seed-'));
  if (seeded) writeFileSync(path.join(dir, 'memory.jsonl'), SEEDED_MEMORY);
  return dir;
}

describe('numbers and new ids: the bookshop fixture under --isolate', () => {
  const setup: Setup = { target: fixtureStdioTarget(), isolate: true };
  let made: Scenario[];
  beforeAll(async () => {
    made = (await generate(setup, 24, 3)).scenarios;
  }, 300_000);

  it('restock gets a state_number check (a stock level that moved by the written amount)', () => {
    const numeric = made.filter((s) => stateKind(s) === 'state_number');
    const tools = new Set(numeric.map(calledTool));
    expect(tools.has('restock')).toBe(true);
    for (const s of numeric.filter((x) => calledTool(x) === 'restock')) {
      const [call, state] = s.checks!;
      if (call.kind !== 'tool_called' || state.kind !== 'state_number') throw new Error('shape');
      // The expected stock is the fixture's starting stock plus the restocked quantity.
      expect(['get_book', 'check_stock']).toContain(state.tool);
      expect(state.args).toEqual({ book_id: call.args.book_id });
      expect(state.path).toEqual(['stock']);
      expect(state.value).toBeGreaterThanOrEqual(call.args.quantity as number);
    }
  });

  it('the oracle passes every check; a do-nothing agent none', async () => {
    const checked = made.filter((s) => s.checks?.length);
    expectOracleAllIdleNone(await oracleAndIdle(setup, checked), checked);
  }, 300_000);
});

describe('server-filesystem serving {sandbox}', () => {
  const user = folderWithFiles();
  const before = readFileSync(path.join(user, 'notes.txt'));
  const setup: Setup = { target: filesystemTarget('{sandbox}'), sandboxFrom: user, isolate: true };
  let made: Scenario[];
  beforeAll(async () => {
    made = (await generate(setup, 16)).scenarios;
  }, 300_000);

  it('stores {sandbox}, never an absolute sandbox path, and the placeholder is substituted per rollout', async () => {
    expect(made.length).toBeGreaterThan(5);
    const text = JSON.stringify(made);
    expect(text).toContain('{sandbox}/notes.txt');
    expect(text).not.toMatch(/mcprl-sandbox-/);
    const checked = made.filter((s) => s.checks?.length);
    expectOracleAllIdleNone(await oracleAndIdle(setup, checked), checked);
    expect(readFileSync(path.join(user, 'notes.txt')).equals(before)).toBe(true);
  }, 300_000);
});

describe('destructive tools get tasks only when allowed, checked by the thing being gone', () => {
  const seed = memoryFolder(true);
  const target = memoryTarget('{sandbox}/memory.jsonl');
  const destructive = /^delete_/;

  it('server-memory without --allow-destructive: no delete_* task', async () => {
    const r = await generate({ target, sandboxFrom: seed, isolate: true }, 16);
    expect(r.scenarios.filter((s) => destructive.test(calledTool(s) ?? ''))).toEqual([]);
    for (const t of ['delete_entities', 'delete_observations', 'delete_relations']) {
      expect(r.coverage.find((c) => c.tool === t)?.reason).toBe('refused_by_policy');
    }
  }, 300_000);

  it('server-memory with --allow-destructive: delete_entities / delete_observations tasks with state_absent; oracle passes, idle does not', async () => {
    const setup: Setup = { target, sandboxFrom: seed, isolate: true, safety: new SafetyPolicy({ allowDestructive: true }) };
    const r = await generate(setup, 24, 2);
    const deletes = r.scenarios.filter((s) => destructive.test(calledTool(s) ?? ''));
    const tools = new Set(deletes.map(calledTool));
    expect(tools.has('delete_entities')).toBe(true);
    expect(tools.has('delete_observations')).toBe(true);
    // Gone: a value the untouched server shows is no longer shown, or a count of matches went down.
    for (const s of deletes) expect(['state_absent', 'state_number']).toContain(stateKind(s));
    expect(deletes.some((s) => stateKind(s) === 'state_absent')).toBe(true);
    expectOracleAllIdleNone(await oracleAndIdle(setup, deletes), deletes);
    expect(readFileSync(path.join(seed, 'memory.jsonl'), 'utf8')).toBe(SEEDED_MEMORY);
  }, 300_000);

  it('server-filesystem with --allow-destructive: move_file tasks whose source is gone', async () => {
    const user = folderWithFiles();
    const setup: Setup = { target: filesystemTarget('{sandbox}'), sandboxFrom: user, isolate: true, safety: new SafetyPolicy({ allowDestructive: true }) };
    const r = await generate(setup, 24, 2);
    const moves = r.scenarios.filter((s) => calledTool(s) === 'move_file');
    expect(moves.length).toBeGreaterThan(0);
    expectOracleAllIdleNone(await oracleAndIdle(setup, moves), moves);
    expect(readFileSync(path.join(user, 'notes.txt'), 'utf8')).toBe('Shopping: apples, pears, walnuts.\n');
  }, 300_000);
});

describe('do-nothing scores 0 and the oracle 100 % on every server of the coverage table', () => {
  const cases: [string, () => Setup][] = [
    ['fixture', () => ({ target: fixtureStdioTarget(), isolate: false })],
    ['server-everything', () => ({ target: everythingStdioTarget(), isolate: false })],
    ['server-filesystem', () => ({ target: filesystemTarget('{sandbox}'), sandboxFrom: folderWithFiles(), isolate: true })],
    ['server-memory, seeded', () => ({ target: memoryTarget('{sandbox}/memory.jsonl'), sandboxFrom: memoryFolder(true), isolate: true })],
    ['server-memory, empty', () => ({ target: memoryTarget('{sandbox}/memory.jsonl'), sandboxFrom: memoryFolder(false), isolate: true })],
  ];
  for (const [name, make] of cases) {
    it(name, async () => {
      const setup = make();
      const checked = (await generate(setup, 10)).scenarios.filter((s) => s.checks?.length);
      expect(checked.length).toBeGreaterThan(0);
      expectOracleAllIdleNone(await oracleAndIdle(setup, checked), checked);
    }, 300_000);
  }
});
