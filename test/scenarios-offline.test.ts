// Offline (schema-driven) scenario generation against real MCP servers: the bookshop fixture and
// @modelcontextprotocol/server-everything. An oracle agent performs exactly the checked calls and answers with
// the checked values it finds in the real outputs; it must satisfy every check of every scenario.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type McpSession, type ToolInfo } from '../src/mcp/index.js';
import { generateOfflineScenarios, type ScenarioServer } from '../src/scenarios/offline/index.js';
import { answerContains, argsMatch, checkedCalls, ScenarioSchema, type Scenario } from '../src/scenarios/scenario.js';
import { everythingStdioTarget, fixtureStdioTarget } from './helpers/servers.js';

/** Records every call that goes through, so the test can prove only read-only tools were called. */
function recording(session: McpSession): ScenarioServer & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    listTools: () => session.listTools(),
    callTool: (name, args, opts) => {
      calls.push(name);
      return session.callTool(name, args, opts);
    },
  };
}

interface OracleResult {
  calls: { tool: string; args: Record<string, unknown> }[];
  outputs: string;
  answer: string;
}

/** The oracle: make exactly the checked calls, then answer with the checked values found in their outputs. */
async function oracle(session: McpSession, s: Scenario): Promise<OracleResult> {
  const calls: OracleResult['calls'] = [];
  let outputs = '';
  const seen = new Set<string>();
  for (const c of checkedCalls(s.checks ?? [])) {
    if (seen.has(JSON.stringify(c))) continue;
    seen.add(JSON.stringify(c));
    const out = await session.callTool(c.tool, c.args);
    expect(out.isError, `${s.id}: ${c.tool} failed: ${out.text}`).toBe(false);
    calls.push({ tool: c.tool, args: c.args });
    outputs += out.text + '\n';
  }
  // Only values that really occur in the outputs go into the answer: the oracle cannot invent them.
  const values = (s.checks ?? []).flatMap((c) => ((c.kind === 'answer_contains' || c.kind === 'answer_value') && answerContains(outputs, c.value) ? [c.value] : []));
  return { calls, outputs, answer: `Here is what I found: ${values.join('; ')}.` };
}

function satisfied(s: Scenario, r: OracleResult): boolean {
  return (s.checks ?? []).every((c) =>
    c.kind === 'tool_called'
      ? r.calls.some((k) => k.tool === c.tool && argsMatch(c.args, k.args))
      : c.kind === 'answer_value'
        ? answerContains(r.answer, c.value, c.tolerance) && answerContains(r.outputs, c.value, c.tolerance)
        : c.kind === 'answer_contains' && answerContains(r.answer, c.value),
  );
}

async function checkAll(session: McpSession, scenarios: Scenario[]): Promise<number> {
  let ok = 0;
  for (const s of scenarios) {
    expect(ScenarioSchema.safeParse(s).success).toBe(true);
    const r = await oracle(session, s);
    expect(satisfied(s, r), `${s.id} not satisfied: ${JSON.stringify(s)} answer=${r.answer}`).toBe(true);
    ok++;
  }
  return ok;
}

describe('offline scenarios on the fixture server', () => {
  let session: McpSession;
  let tools: ToolInfo[];
  beforeAll(async () => {
    session = await connect(fixtureStdioTarget());
    tools = await session.listTools();
  });
  afterAll(async () => session?.close());

  it('yields at least 30 distinct verifiable scenarios, calls only read-only tools, and the oracle satisfies all', async () => {
    const server = recording(session);
    const r = await generateOfflineScenarios(server, { count: 60, seed: 11 });
    const readOnly = new Set(tools.filter((t) => t.annotations.readOnlyHint).map((t) => t.name));
    expect(server.calls.length).toBeGreaterThan(0);
    expect(server.calls.filter((c) => !readOnly.has(c))).toEqual([]);
    expect(r.scenarios.length).toBeGreaterThanOrEqual(30);
    expect(new Set(r.scenarios.map((s) => s.task)).size).toBe(r.scenarios.length);
    expect(new Set(r.scenarios.map((s) => s.id)).size).toBe(r.scenarios.length);
    for (const s of r.scenarios) {
      expect(s.source).toBe('schema');
      expect(checkedCalls(s.checks ?? []).length).toBeGreaterThan(0);
      // A task that asks for values is judged by its outcome: the values, from whichever tool the agent chose.
      if (s.checks?.some((c) => c.kind === 'answer_value')) expect(s.checks.filter((c) => c.kind === 'tool_called' || c.kind === 'answer_contains')).toEqual([]);
    }
    expect(r.scenarios.filter((s) => s.checks?.some((c) => c.kind === 'answer_value')).length).toBeGreaterThan(r.scenarios.length / 2);
    // The values other books and authors have for the same question: an answer pasting a whole listing fails.
    expect(r.scenarios.some((s) => s.checks?.some((c) => c.kind === 'answer_value' && (c.others?.length ?? 0) > 0))).toBe(true);
    // Multi-step shapes are present: chains (find an id by name, then use it) and flows (two checked calls).
    expect(r.scenarios.some((s) => s.difficulty >= 3)).toBe(true);
    expect(r.scenarios.some((s) => new Set(checkedCalls(s.checks ?? []).map((c) => JSON.stringify(c))).size >= 2)).toBe(true);
    expect(await checkAll(session, r.scenarios)).toBe(r.scenarios.length);
  });

  it('a listing too long to ask about unfiltered (every author) is asked narrowed by a filter the tool takes', async () => {
    for (const seed of [1, 2]) {
      const r = await generateOfflineScenarios(session, { count: 12, seed });
      const asked = r.scenarios.filter((s) => checkedCalls(s.checks ?? []).some((c) => c.tool === 'list_authors'));
      expect(asked.length, `seed ${seed}: ${JSON.stringify(r.coverage.find((c) => c.tool === 'list_authors'))}`).toBeGreaterThan(0);
      for (const s of asked) expect(checkedCalls(s.checks!).find((c) => c.tool === 'list_authors')?.args).toHaveProperty('country');
      expect(await checkAll(session, asked)).toBe(asked.length);
    }
  });

  it('is reproducible by seed and varies with it', async () => {
    const a = await generateOfflineScenarios(session, { count: 12, seed: 5 });
    const b = await generateOfflineScenarios(session, { count: 12, seed: 5 });
    const c = await generateOfflineScenarios(session, { count: 12, seed: 6 });
    expect(b.scenarios).toEqual(a.scenarios);
    expect(c.scenarios.map((s) => s.task)).not.toEqual(a.scenarios.map((s) => s.task));
  });

  it('partitions give disjoint entity keys and phrasing templates', async () => {
    const parts = await Promise.all([0, 1, 2].map((index) => generateOfflineScenarios(session, { count: 10, seed: 3, partition: { index, of: 3 } })));
    const keyOf = (s: Scenario) => JSON.stringify(checkedCalls(s.checks ?? [])[0]);
    const firstCallArgs = parts.map((p) => new Set(p.scenarios.map((s) => keyOf(s).replace(/"tool":"[^"]*",?/, ''))));
    for (let i = 0; i < 3; i++) {
      expect(parts[i].scenarios.length).toBeGreaterThanOrEqual(8);
      for (let j = i + 1; j < 3; j++) for (const k of firstCallArgs[i]) expect(firstCallArgs[j].has(k), k).toBe(false);
    }
    const tasks = parts.map((p) => new Set(p.scenarios.map((s) => s.task)));
    for (const t of tasks[0]) expect(tasks[1].has(t) || tasks[2].has(t)).toBe(false);
  });

  it('exclude drops scenarios that use excluded entities in arguments or answers', async () => {
    const r = await generateOfflineScenarios(session, { count: 15, seed: 9, exclude: { entities: ['bk-001', 'bk-002', 'au-01'] } });
    const json = JSON.stringify(r.scenarios.map((s) => s.checks));
    expect(json).not.toMatch(/"bk-00[12]"|"au-01"/);
  });
});

describe("offline scenarios on server-everything's read-only tools", () => {
  let session: McpSession;
  beforeAll(async () => {
    session = await connect(everythingStdioTarget());
  });
  afterAll(async () => session?.close());

  it('yields at least 10 distinct verifiable scenarios, all satisfied by the oracle', async () => {
    const tools = await session.listTools();
    const server = recording(session);
    // A short call timeout: its long-running demo tool is dropped after one slow call.
    const r = await generateOfflineScenarios(server, { count: 20, seed: 2, callTimeoutMs: 3000 });
    const readOnly = new Set(tools.filter((t) => t.annotations.readOnlyHint).map((t) => t.name));
    expect(server.calls.filter((c) => !readOnly.has(c))).toEqual([]);
    const writes = r.coverage.filter((c) => c.reason === 'writes_state').map((c) => c.tool);
    expect(writes).toEqual(expect.arrayContaining(['toggle-simulated-logging', 'gzip-file-as-resource']));
    // Every tool is reported once; the counts are those of the scenarios made.
    expect(r.coverage.map((c) => c.tool).sort()).toEqual(tools.map((t) => t.name).sort());
    for (const c of r.coverage) {
      expect(c.scenarios).toBe(r.scenarios.filter((s) => checkedCalls(s.checks ?? []).some((k) => k.tool === c.tool)).length);
      expect(c.reason === undefined).toBe(c.scenarios > 0);
    }
    expect(r.scenarios.length).toBeGreaterThanOrEqual(10);
    expect(await checkAll(session, r.scenarios)).toBe(r.scenarios.length);
  });
});
