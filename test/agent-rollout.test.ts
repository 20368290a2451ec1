/**
 * The rollout loop against the real bookshop fixture server (stdio). The policy is a scripted HTTP double
 * (test/doubles/policy-double.ts) standing in for a remote model, reached through the real OpenAI SDK.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOKS, RATES } from '../fixtures/server/bookshop.js';
import { OpenAIPolicy, type Policy, type PolicyTurn } from '../src/agent/policy.js';
import { rollout } from '../src/agent/rollout.js';
import { rolloutGroups } from '../src/agent/rollout-groups.js';
import { McpTrajectorySchema, type McpTrajectory } from '../src/agent/trajectory.js';
import { connect, SafetyPolicy, type McpSession, type ToolInfo } from '../src/mcp/index.js';
import { scoreChecks } from '../src/ruler/checks.js';
import type { Scenario } from '../src/scenarios/scenario.js';
import { hangReply, startOpenAIDouble, type OpenAIDouble } from './doubles/openai-double.js';
import { badStrategy, goodStrategy, scriptedStrategy, startPolicyDouble, type Strategy } from './doubles/policy-double.js';
import { everythingStdioTarget, fixtureStdioTarget, startFixtureHttp } from './helpers/servers.js';

const book = BOOKS[2];
const eur = Math.round(book.price_usd * RATES.EUR * 100) / 100;
const priceScenario: Scenario = {
  id: 'price-eur',
  task: `How much does the book with id ${book.id} cost in euros?`,
  difficulty: 2,
  source: 'schema',
  checks: [
    { kind: 'tool_called', tool: 'get_book', args: { book_id: book.id } },
    { kind: 'tool_called', tool: 'convert_price', args: { amount: book.price_usd, currency: 'EUR' } },
    { kind: 'answer_contains', value: String(eur) },
  ],
};

let session: McpSession;
let tools: ToolInfo[];
const doubles: OpenAIDouble[] = [];

async function policyFor(strategy: Strategy): Promise<{ policy: OpenAIPolicy; double: OpenAIDouble }> {
  const double = await startPolicyDouble(strategy);
  doubles.push(double);
  return { policy: new OpenAIPolicy({ baseURL: double.baseURL, model: 'double', maxRetries: 0 }), double };
}

/** Every tool call of every assistant turn is answered by exactly one tool message, right after it, in order. */
function expectEveryCallAnswered(t: McpTrajectory): void {
  t.messages.forEach((m, i) => {
    if (m.role !== 'assistant' || !m.tool_calls?.length) return;
    const answers = t.messages.slice(i + 1, i + 1 + m.tool_calls.length);
    expect(answers.map((a) => a.role)).toEqual(m.tool_calls.map(() => 'tool'));
    expect(answers.map((a) => a.tool_call_id)).toEqual(m.tool_calls.map((c) => c.id));
  });
}

beforeAll(async () => {
  session = await connect(fixtureStdioTarget());
  tools = await session.listTools();
});

afterAll(async () => {
  await session?.close();
  await Promise.all(doubles.map((d) => d.close()));
});

describe('rollout against the fixture server', () => {
  it('plays a good strategy to completion, one call per turn, and satisfies every check', async () => {
    const { policy, double } = await policyFor(goodStrategy([priceScenario]));
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(McpTrajectorySchema.parse(t)).toBeTruthy();
    expect(t.error).toBeUndefined();
    expect(t.metrics).toMatchObject({ turns: 3, tool_calls: 3, tool_errors: 0, invalid_calls: 0, completed: true, ran_out_of_turns: false });
    expect(t.final_answer).toContain(String(eur));
    expect(scoreChecks(t, priceScenario)).toMatchObject({ passed: 3, total: 3, fraction: 1 });
    expectEveryCallAnswered(t);
    // The policy saw the server's tools plus complete_task, natively, and the default system prompt.
    const first = double.requests.find((r) => r.method === 'POST')!.body;
    const names = first.tools.map((x: any) => x.function.name);
    expect(names).toEqual(expect.arrayContaining(['get_book', 'convert_price', 'place_order', 'complete_task']));
    expect(first.messages[0].content).toMatch(/complete_task/);
    expect(first.messages[1]).toEqual({ role: 'user', content: priceScenario.task });
  });

  it('executes parallel tool calls in order and answers each', async () => {
    const { policy } = await policyFor(goodStrategy([priceScenario], { parallel: true }));
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(t.metrics).toMatchObject({ turns: 2, tool_calls: 3, invalid_calls: 0, completed: true });
    const assistant = t.messages[2];
    expect(assistant.tool_calls!.map((c) => c.function.name)).toEqual(['get_book', 'convert_price']);
    expectEveryCallAnswered(t);
    expect(JSON.parse(t.messages[3].content!).id).toBe(book.id);
    expect(JSON.parse(t.messages[4].content!).converted).toBe(eur);
    expect(scoreChecks(t, priceScenario).fraction).toBe(1);
  });

  it('a bad strategy completes but fails the checks', async () => {
    const { policy } = await policyFor(badStrategy());
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(t.metrics.completed).toBe(true);
    expect(scoreChecks(t, priceScenario)).toMatchObject({ passed: 0, total: 3 });
  });

  it('records malformed calls of every kind as invalid, answers each with a useful error, and carries on', async () => {
    const { policy, double } = await policyFor(
      scriptedStrategy(
        [
          {
            content: 'Let me try a few things.',
            toolCalls: [
              { name: 'get_book', arguments: '{"book_id": "bk-003"' }, // not JSON
              { name: 'get_bok', arguments: { book_id: 'bk-003' } }, // unknown tool
              { name: 'get_book', arguments: { book_id: 7 } }, // wrong type
              { name: 'place_order', arguments: { items: [{ book_id: 'bk-001', quantity: 0 }] } }, // missing + bound
              { name: 'convert_price', arguments: '[1, "EUR"]' }, // JSON but not an object
              { name: 'complete_task', arguments: { answer: 'x' } }, // complete_task without summary
              { arguments: { book_id: 'bk-003' } }, // no function name at all
              { name: 'get_book', arguments: { book_id: 'bk-003' } }, // finally a valid one
            ],
          },
        ],
        'gave up',
      ),
    );
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(McpTrajectorySchema.parse(t)).toBeTruthy();
    expect(t.error).toBeUndefined();
    expect(t.metrics).toMatchObject({ turns: 2, invalid_calls: 7, tool_errors: 0, completed: true });
    expect(t.metrics.tool_calls).toBe(9); // 8 in the first turn (one nameless) + complete_task
    expectEveryCallAnswered(t);
    const answers = t.messages.filter((m) => m.role === 'tool').map((m) => m.content!);
    expect(answers[0]).toMatch(/invalid tool call.*not valid JSON/);
    expect(answers[1]).toMatch(/Unknown tool "get_bok".*get_book/);
    expect(answers[2]).toMatch(/book_id must be string/);
    expect(answers[3]).toMatch(/must have required property 'customer'/);
    expect(answers[3]).toMatch(/quantity must be >= 1/);
    expect(answers[4]).toMatch(/must be a JSON object/);
    expect(answers[5]).toMatch(/complete_task needs a "summary"/);
    expect(JSON.parse(answers[6]).id).toBe('bk-003'); // the valid call really ran
    // The nameless call has no id to answer; it comes back as a user message.
    expect(t.messages.some((m) => m.role === 'user' && /could not be parsed.*no function name/.test(m.content!))).toBe(true);
    // The model saw all those errors on its next turn.
    const second = double.requests.filter((r) => r.method === 'POST')[1].body;
    expect(second.messages.filter((m: any) => m.role === 'tool')).toHaveLength(7);
    expect(second.messages.at(-1).content).toMatch(/could not be parsed/);
    expect(t.final_answer).toBe('gave up');
  });

  it('feeds tool errors and safety refusals back as data', async () => {
    const { policy } = await policyFor(
      scriptedStrategy([
        { toolCalls: [{ name: 'get_book', arguments: { book_id: 'bk-999' } }] },
        { toolCalls: [{ name: 'cancel_order', arguments: { order_id: 'ord-0001' } }] },
      ]),
    );
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(t.metrics).toMatchObject({ tool_errors: 2, invalid_calls: 0, completed: true });
    const answers = t.messages.filter((m) => m.role === 'tool').map((m) => m.content!);
    expect(answers[0]).toMatch(/No book with id bk-999/);
    expect(answers[1]).toMatch(/safety policy refused tool 'cancel_order'/);
    // What the model reads names no option to rerun with; the operator finds them in the logs.
    expect(answers[1]).not.toMatch(/--allow|rerun/i);
    expect(t.logs.some((l) => /the safety policy refused cancel_order: .*--/.test(l))).toBe(true);
  });

  it('keeps token ids and logprobs on assistant turns when the endpoint returns them', async () => {
    const { policy } = await policyFor(
      scriptedStrategy([
        { toolCalls: [{ name: 'get_book', arguments: { book_id: 'bk-001' } }], tokenIds: [11, 12, 13], logprobs: [-0.1, -0.2, -0.3] },
      ]),
    );
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    const assistants = t.messages.filter((m) => m.role === 'assistant');
    expect(assistants[0].mcprl).toEqual({ token_ids: [11, 12, 13], logprobs: [-0.1, -0.2, -0.3] });
    expect(assistants[1].mcprl).toBeUndefined();
  });

  it('a plain text answer ends the rollout and is the final answer', async () => {
    const { policy } = await policyFor(scriptedStrategy([{ content: `It costs ${eur} EUR.` }]));
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(t.metrics).toMatchObject({ turns: 1, tool_calls: 0, completed: true });
    expect(t.final_answer).toBe(`It costs ${eur} EUR.`);
  });

  it('an empty reply without a tool call ends the rollout unfinished', async () => {
    const { policy } = await policyFor(scriptedStrategy([{ content: '  ' }]));
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(t.metrics).toMatchObject({ turns: 1, completed: false, ran_out_of_turns: false });
    expect(t.final_answer).toBeNull();
  });

  it('stops at max turns', async () => {
    const { policy } = await policyFor(() => ({ toolCalls: [{ name: 'list_authors', arguments: {} }] }));
    const t = await rollout({ policy, session, tools, scenario: priceScenario, maxTurns: 3 });
    expect(t.metrics).toMatchObject({ turns: 3, tool_calls: 3, completed: false, ran_out_of_turns: true });
    expect(t.final_answer).toBeNull();
  });

  it('a failing policy endpoint ends the rollout with an error instead of throwing', async () => {
    const { policy } = await policyFor(() => ({ httpStatus: 500 }));
    const t = await rollout({ policy, session, tools, scenario: priceScenario });
    expect(t.error).toMatch(/HTTP 500/);
    expect(t.metrics).toMatchObject({ turns: 0, completed: false, ran_out_of_turns: false });
    expect(McpTrajectorySchema.parse(t)).toBeTruthy();
  });

  it('a policy that never answers hits the rollout timeout', async () => {
    const never: Policy = { name: 'never', next: () => new Promise<PolicyTurn>(() => undefined) };
    const t = await rollout({ policy: never, session, tools, scenario: priceScenario, rolloutTimeoutMs: 300 });
    expect(t.error).toMatch(/rollout timed out after 300 ms/);
    expect(t.metrics.completed).toBe(false);
  });

  it('an OpenAI endpoint that never answers is aborted at the rollout timeout', async () => {
    const silent = await startOpenAIDouble([], { fallback: hangReply() });
    doubles.push(silent);
    const policy = new OpenAIPolicy({ baseURL: silent.baseURL, model: 'silent', maxRetries: 0 });
    const t = await rollout({ policy, session, tools, scenario: priceScenario, rolloutTimeoutMs: 300 });
    expect(t.error).toMatch(/rollout timed out after 300 ms/);
    expect(silent.requests.filter((r) => r.method === 'POST')).toHaveLength(1);
  });

  it('treats tool calls the policy could not parse (engine-style invalidToolCalls) as invalid calls', async () => {
    // An in-process Policy like the engine's, which reports malformed Hermes <tool_call> blocks it could not parse.
    let step = 0;
    const engineLike: Policy = {
      name: 'engine-like',
      next: async () =>
        step++ === 0
          ? { content: '<tool_call>{"name": "get_book", </tool_call>', toolCalls: [], finishReason: 'stop', invalidToolCalls: [{ raw: '{"name": "get_book", ', error: 'Unexpected end of JSON input' }], tokenIds: [1, 2], logprobs: [-1, -2] }
          : { content: null, toolCalls: [{ id: 'c1', name: 'complete_task', arguments: '{"summary":"ok"}' }], finishReason: 'tool_calls' },
    };
    const t = await rollout({ policy: engineLike, session, tools, scenario: priceScenario });
    expect(t.metrics).toMatchObject({ turns: 2, invalid_calls: 1, tool_calls: 2, completed: true });
    expect(t.messages[3]).toMatchObject({ role: 'user' });
    expect(t.messages[3].content).toMatch(/could not be parsed \(Unexpected end of JSON input\)/);
    expect(t.messages[2].mcprl).toEqual({ token_ids: [1, 2], logprobs: [-1, -2] });
  });
});

describe('rolloutGroups', () => {
  const stockScenario: Scenario = {
    id: 'restock',
    task: 'Restock bk-001 with 50 copies and tell me the stock afterwards.',
    difficulty: 2,
    source: 'llm',
  };
  const restockThenCheck = scriptedStrategy([
    { toolCalls: [{ name: 'restock', arguments: { book_id: 'bk-001', quantity: 50 } }] },
    { toolCalls: [{ name: 'check_stock', arguments: { book_id: 'bk-001' } }] },
  ]);
  const stockSeen = (t: McpTrajectory) => JSON.parse(t.messages.filter((m) => m.role === 'tool')[1].content!).stock as number;

  it('--isolate gives every rollout a fresh server: a mutation in one is invisible to the others', async () => {
    const { policy } = await policyFor(restockThenCheck);
    const groups = await rolloutGroups({ policy, target: fixtureStdioTarget(), scenarios: [stockScenario], rolloutsPerGroup: 3, concurrency: 1, isolate: true, stateInMemory: true });
    expect(groups).toHaveLength(1);
    expect(groups[0].map(stockSeen)).toEqual([BOOKS[0].stock + 50, BOOKS[0].stock + 50, BOOKS[0].stock + 50]);
    expect(groups[0].map((t) => t.id)).toEqual(['restock/0', 'restock/1', 'restock/2']);
    expect(groups[0].every((t) => t.group_id === 'restock')).toBe(true);
  });

  it('without --isolate the rollouts share one server process, so the same mutations accumulate', async () => {
    const { policy } = await policyFor(restockThenCheck);
    const groups = await rolloutGroups({
      policy, target: fixtureStdioTarget(), scenarios: [stockScenario], rolloutsPerGroup: 3, concurrency: 1,
      policyForSafety: new SafetyPolicy({ allowUnisolatedWrites: true }),
    });
    expect(groups[0].map(stockSeen)).toEqual([BOOKS[0].stock + 50, BOOKS[0].stock + 100, BOOKS[0].stock + 150]);
  });

  it('over HTTP every rollout has its own connection to the one server (state is the server\'s)', async () => {
    const server = await startFixtureHttp();
    try {
      const { policy } = await policyFor(restockThenCheck);
      const groups = await rolloutGroups({
        policy, target: { kind: 'http', url: server.url }, scenarios: [stockScenario], rolloutsPerGroup: 2, concurrency: 1, isolate: true,
        policyForSafety: new SafetyPolicy({ allowUnisolatedWrites: true }),
      });
      expect(groups[0].map(stockSeen)).toEqual([BOOKS[0].stock + 50, BOOKS[0].stock + 100]);
      expect(groups[0][0].logs.join('\n')).toMatch(/isolate: HTTP targets cannot be restarted/);
    } finally {
      await server.stop();
    }
  });

  it('a rollout whose connection fails comes back as a trajectory with the error', async () => {
    const { policy } = await policyFor(restockThenCheck);
    const groups = await rolloutGroups({ policy, target: { kind: 'http', url: 'http://127.0.0.1:9/mcp' }, scenarios: [stockScenario], rolloutsPerGroup: 2, concurrency: 2, connectTimeoutMs: 5000 });
    expect(groups[0]).toHaveLength(2);
    for (const t of groups[0]) {
      expect(McpTrajectorySchema.parse(t).error).toBeTruthy();
      expect(t.metrics).toMatchObject({ turns: 0, completed: false });
    }
  });

  it('runs K rollouts per scenario concurrently and keeps groups in scenario order', async () => {
    const other: Scenario = { ...priceScenario, id: 'price-eur-2', task: `Price of ${book.id} in EUR, please.` };
    const { policy } = await policyFor(goodStrategy([priceScenario, other]));
    let progress = 0;
    const groups = await rolloutGroups({
      policy,
      target: fixtureStdioTarget(),
      scenarios: [priceScenario, other],
      rolloutsPerGroup: 2,
      concurrency: 3,
      onTrajectory: (_t, done, total) => {
        progress = done;
        expect(total).toBe(4);
      },
    });
    expect(progress).toBe(4);
    expect(groups.map((g) => g.map((t) => t.scenario_id))).toEqual([
      ['price-eur', 'price-eur'],
      ['price-eur-2', 'price-eur-2'],
    ]);
    for (const t of groups.flat()) expect(scoreChecks(t, priceScenario).fraction).toBe(1);
  });
});

describe('rollout against server-everything', () => {
  it('a tool call over its per-call timeout is answered with an error and the rollout carries on', async () => {
    const everything = await connect(everythingStdioTarget());
    try {
      const everythingTools = await everything.listTools();
      const { policy } = await policyFor(
        scriptedStrategy([
          { toolCalls: [{ name: 'trigger-long-running-operation', arguments: { duration: 30, steps: 2 } }] },
          { toolCalls: [{ name: 'echo', arguments: { message: 'still here' } }] },
        ]),
      );
      const t = await rollout({ policy, session: everything, tools: everythingTools, scenario: priceScenario, callTimeoutMs: 500 });
      expect(t.error).toBeUndefined();
      expect(t.metrics).toMatchObject({ turns: 3, tool_calls: 3, tool_errors: 1, invalid_calls: 0, completed: true });
      const answers = t.messages.filter((m) => m.role === 'tool').map((m) => m.content!);
      expect(answers[0]).toMatch(/^Error: .*tim/i);
      expect(answers[1]).toMatch(/still here/);
    } finally {
      await everything.close();
    }
  });
});
