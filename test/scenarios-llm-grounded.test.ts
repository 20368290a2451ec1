/**
 * LLM scenarios grounded in the server (issue 13 §7), on the real bundled fixture server and the real server-memory
 * (stdio, from node_modules) with a seeded memory file. The LLM is the OpenAI-compatible HTTP double (a stand-in for
 * a remote LLM API, which cannot run here): it answers with tasks built on entities its prompt carried, one feasible
 * and the others not. The agents are the scripted policies of test/doubles (an oracle making the checked calls, and
 * one that does nothing); the judge for `--reward blend` is the HTTP double too.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { AUTHORS, BOOKS } from '../fixtures/server/bookshop.js';
import { OpenAIPolicy } from '../src/agent/policy.js';
import { rolloutGroups } from '../src/agent/rollout-groups.js';
import { McpTrajectorySchema } from '../src/agent/trajectory.js';
import { connect, type McpSession } from '../src/mcp/index.js';
import type { Target } from '../src/mcp/types.js';
import { scoreChecks } from '../src/ruler/checks.js';
import { writeScenarioSet, type Scenario } from '../src/scenarios/scenario.js';
import { generateScenarioSet } from '../src/scenarios/scenario-set.js';
import { chatReply, startOpenAIDouble, type OpenAIDouble } from './doubles/openai-double.js';
import { goodStrategy, scriptedStrategy, startPolicyDouble, type Strategy } from './doubles/policy-double.js';
import { FIXTURE_SERVER_MAIN, fixtureStdioTarget, memoryTarget, REPO_ROOT, SEEDED_MEMORY, folderWithSeededMemory } from './helpers/servers.js';

const doubles: OpenAIDouble[] = [];
const sessions: McpSession[] = [];
afterAll(async () => {
  await Promise.all(sessions.map((s) => s.close()));
  await Promise.all(doubles.map((d) => d.close()));
});

type Item = { task: string; difficulty: number; solution: { calls: { tool: string; arguments: string }[]; answer_contains: string[] } };
const item = (task: string, tool: string, args: Record<string, unknown>, answer: string[] = []): Item => ({
  task, difficulty: 2, solution: { calls: [{ tool, arguments: JSON.stringify(args) }], answer_contains: answer },
});

/** A generator double that answers `items` only when its prompt carries `entityLine`, else nothing usable. */
async function generatorDouble(entityLine: string, items: Item[]): Promise<OpenAIDouble> {
  const llm = await startOpenAIDouble([], {
    fallback: (req) => chatReply(JSON.stringify({ scenarios: String(req.body.messages[1].content).includes(entityLine) ? items : [] })),
  });
  doubles.push(llm);
  return llm;
}

async function scores(target: Target, scenarios: Scenario[], strategy: Strategy, sandboxFrom?: string) {
  const double = await startPolicyDouble(strategy);
  doubles.push(double);
  const policy = new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
  // The fixture keeps its state in memory; a server on a {sandbox} needs no such word.
  const groups = await rolloutGroups({ policy, target, scenarios, rolloutsPerGroup: 1, concurrency: 2, isolate: true, sandboxFrom, stateInMemory: sandboxFrom === undefined });
  return scenarios.map((s, i) => scoreChecks(groups[i][0], s));
}

describe('grounded LLM scenarios', () => {
  const book = BOOKS.find((b) => b.id === 'bk-003')!;
  const author = AUTHORS.find((a) => a.id === book.author_id)!.name;
  let kept: Scenario[];

  it('fixture server: the prompt carries the discovered entities; the infeasible tasks are dropped and counted; the kept one is checked', async () => {
    const llm = await generatorDouble('- id = "bk-003" (shown by search_books)', [
      item('What is the title of the book with id bk-999?', 'get_book', { book_id: 'bk-999' }, ['The Lost Book']),
      item('Which genre is the book bk-004 filed under?', 'get_book', { book_id: 'bk-004' }, ['interpretive dance']),
      item('Who wrote the book bk-003, and in which year did it come out?', 'get_book', { book_id: 'bk-003' }, [author, String(book.year)]),
    ]);
    const target = fixtureStdioTarget();
    const session = await connect(target);
    sessions.push(session);
    const set = await generateScenarioSet(session, {
      count: 1, generator: { baseURL: llm.baseURL, model: 'gen', apiKey: 'test' }, isolatedServer: () => connect(target, { isolated: true, stateInMemory: true }),
    });
    const prompt = String(llm.requests[0].body.messages[1].content);
    expect(prompt).toContain('- name = "Margaret Holloway" (shown by list_authors)');
    expect(prompt).toMatch(/- title = "[^"]+" \(shown by search_books\)/);
    // The schema the LLM answers with asks for each task's solution.
    expect(llm.requests[0].body.response_format.json_schema.schema.properties.scenarios.items.required).toContain('solution');
    expect(set.summary.droppedInfeasible).toEqual({ call_failed: 1, answer_not_in_output: 1 });
    expect(set.summary.droppedUnverifiable).toBe(2);
    kept = [...set.train, ...set.val];
    expect(kept).toHaveLength(1);
    // Judged by the outcome: the values, from whichever tool the agent reads them; the solution's call is kept as `via`.
    const via = [{ tool: 'get_book', args: { book_id: 'bk-003' } }];
    expect(kept[0].checks).toEqual([
      { kind: 'answer_value', value: author, via },
      { kind: 'answer_value', value: String(book.year), via },
    ]);
    expect(set.summary.coverage.find((c) => c.tool === 'get_book')).toMatchObject({ scenarios: 1 });

    const oracle = await scores(target, kept, goodStrategy(kept));
    expect(oracle[0].passed).toBe(oracle[0].total);
    const idle = await scores(target, kept, scriptedStrategy([], ''));
    expect(idle[0].passed).toBe(0);
  }, 120_000);

  it('`mcprl eval --reward blend` scores the kept LLM task with both components', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-grounded-'));
    await writeScenarioSet(path.join(dir, 'scenarios'), kept, kept.map((s) => ({ ...s, id: `${s.id}-val` })));
    const policy = await startPolicyDouble(goodStrategy(kept));
    const judge = await startOpenAIDouble([], {
      fallback: (req) => {
        const ids = [...String(req.body.messages[1].content).matchAll(/<trajectory id="(\d+)">/g)].map((m) => m[1]);
        return chatReply(JSON.stringify({ scores: ids.map((id) => ({ trajectory_id: id, explanation: 'fine', score: 0.6 })) }));
      },
    });
    doubles.push(policy, judge);
    const out = path.join(dir, 'eval');
    const args = [
      '--import', 'tsx', path.join(REPO_ROOT, 'src', 'cli', 'entry.ts'), 'eval', '--scenarios', path.join(dir, 'scenarios'), '--split', 'train',
      '--model-base-url', policy.baseURL, '--model', 'good', '--judge-base-url', judge.baseURL, '--judge-model', 'judge', '--reward', 'blend',
      '--out', out, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN,
    ];
    await promisify(execFile)(process.execPath, args, { cwd: REPO_ROOT, env: { ...process.env, OPENAI_API_KEY: 'test-key' } });
    const [t] = (await readFile(path.join(out, 'trajectories.jsonl'), 'utf8')).trim().split('\n').map((l) => McpTrajectorySchema.parse(JSON.parse(l)));
    expect(t.reward_components).toEqual({ ruler: 0.6, checks: 1 });
    expect(t.reward).toBeCloseTo(0.8, 12);
  }, 120_000);

  it('server-memory, seeded: a write task is replayed on an isolated server and checked by state; the user file is untouched', async () => {
    const seed = folderWithSeededMemory();
    const target = memoryTarget('{sandbox}/memory.jsonl');
    const llm = await generatorDouble('- name = "Ada Lovelace"', [
      item('Note on Grace Hopper that she invented the compiler.', 'add_observations', { observations: [{ entityName: 'Grace Hopper', contents: ['invented the compiler'] }] }),
      item('Note on Ada Lovelace that she was a countess.', 'add_observations', { observations: [{ entityName: 'Ada Lovelace', contents: ['was a countess'] }] }),
    ]);
    const session = await connect(target, { sandboxFrom: seed });
    sessions.push(session);
    const set = await generateScenarioSet(session, {
      count: 1, generator: { baseURL: llm.baseURL, model: 'gen', apiKey: 'test' }, isolatedServer: () => connect(target, { sandboxFrom: seed, isolated: true }),
    });
    expect(set.summary.droppedInfeasible).toEqual({ call_failed: 1 });
    const writes = [...set.train, ...set.val];
    expect(writes).toHaveLength(1);
    const [call, state] = writes[0].checks!;
    expect(call).toEqual({ kind: 'tool_called', tool: 'add_observations', args: { observations: [{ entityName: 'Ada Lovelace', contents: ['was a countess'] }] } });
    expect(state).toMatchObject({ kind: 'state_contains', value: 'was a countess' });
    expect(set.summary.coverage.find((c) => c.tool === 'add_observations')).toMatchObject({ scenarios: 1, stateChecked: 1 });

    const oracle = await scores(target, writes, goodStrategy(writes), seed);
    expect(oracle[0].passed).toBe(oracle[0].total);
    const idle = await scores(target, writes, scriptedStrategy([], ''), seed);
    expect(idle[0].passed).toBe(0);
    expect(readFileSync(path.join(seed, 'memory.jsonl'), 'utf8')).toBe(SEEDED_MEMORY);
  }, 180_000);
});
