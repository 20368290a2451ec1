/**
 * An LLM's rewording of offline tasks (`mcprl scenarios --offline --generator-model M`): a rewording is kept only when
 * it asks what the checks judge; the checks never change; a failing endpoint leaves the generated wording and says so.
 * The LLM is the OpenAI test double (it stands in for a remote LLM API, which cannot run here); the MCP server in the
 * command's run is the real bookshop fixture.
 */
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { rephraseTasks, rewordingProblem } from '../src/scenarios/rephrase.js';
import { loadScenarioSet, type Scenario } from '../src/scenarios/scenario.js';
import { ScenarioSummarySchema } from '../src/scenarios/scenario-set.js';
import { chatReply, httpError, startOpenAIDouble, type OpenAIDouble, type RecordedRequest } from './doubles/openai-double.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from './helpers/servers.js';

const TOOLS = [
  { name: 'get_book', inputSchema: { type: 'object', properties: { book_id: { type: 'string' } } } },
  { name: 'convert_price', inputSchema: { type: 'object', properties: { amount: { type: 'number' }, currency: { type: 'string' } } } },
  { name: 'search_books', inputSchema: { type: 'object', properties: { query: { type: 'string' }, genre: { type: 'string' } } } },
];

const scenario = (id: string, task: string, tool: string, args: Record<string, unknown>, answer: string): Scenario => ({
  id, task, difficulty: 1, source: 'schema',
  checks: [{ kind: 'tool_called', tool, args }, { kind: 'answer_contains', value: answer }],
});

const TITLE = scenario('s1', 'What is the title of the book bk-014?', 'get_book', { book_id: 'bk-014' }, 'The Winter Atlas');
const CONVERT = scenario('s2', 'What is the converted value of 63.6 USD in JPY?', 'convert_price', { amount: 63.6, currency: 'JPY' }, '9540');
const SEARCH = scenario('s3', 'Tell me the title of the book matching "Silent" of the "children" genre.', 'search_books', { query: 'Silent', genre: 'children' }, 'The Silent Fox');
const YEAR = scenario('s4', 'In which year did the book bk-020 come out?', 'get_book', { book_id: 'bk-020' }, '1987');

describe('a rewording of a task', () => {
  it('is kept when it states every value of the task and nothing more, and names no tool', () => {
    expect(rewordingProblem(TITLE, "Could you tell me bk-014's title?", TOOLS)).toBeUndefined();
    expect(rewordingProblem(CONVERT, 'How much is 63.6 USD in JPY?', TOOLS)).toBeUndefined();
    expect(rewordingProblem(SEARCH, 'Which "children" book matches "Silent"? I need its title.', TOOLS)).toBeUndefined();
  });

  it('is refused when it drops or changes a value, adds one, gives the answer away, names a tool, or is empty or long', () => {
    expect(rewordingProblem(SEARCH, 'Which "children" book is it? I need its title.', TOOLS)).toBe('drops_value');
    expect(rewordingProblem(CONVERT, 'How much is 63 USD in JPY?', TOOLS)).toBe('drops_value');
    expect(rewordingProblem(CONVERT, 'How much is 63.6 USD in yen?', TOOLS)).toBe('drops_value');
    expect(rewordingProblem(TITLE, 'What is the title of bk-0145?', TOOLS)).toBe('drops_value');
    expect(rewordingProblem(TITLE, 'What is the title of the book bk-014 by "Ann Lee"?', TOOLS)).toBe('adds_value');
    expect(rewordingProblem(TITLE, 'Is the title of the book bk-014 The Winter Atlas?', TOOLS)).toBe('adds_value');
    expect(rewordingProblem(TITLE, 'Use get_book to find the title of bk-014.', TOOLS)).toBe('names_tool');
    expect(rewordingProblem(TITLE, 'Look up book id bk-014 with get book and give me its title.', TOOLS)).toBe('names_tool');
    expect(rewordingProblem(TITLE, '  ', TOOLS)).toBe('empty');
    expect(rewordingProblem(TITLE, undefined, TOOLS)).toBe('missing');
    expect(rewordingProblem(TITLE, `What is the title of the book bk-014? ${'Please be thorough. '.repeat(6)}`, TOOLS)).toBe('too_long');
  });
});

/** The tasks a rewording request carries, by id. */
const sent = (req: RecordedRequest): { id: string; task: string }[] => JSON.parse(req.body.messages[1].content).tasks;

let llm: OpenAIDouble | undefined;
afterEach(async () => {
  await llm?.close();
  llm = undefined;
});

describe('rephraseTasks', () => {
  it('keeps a good rewording, refuses one that drops a quoted value, names a tool or is missing, and never touches a check', async () => {
    llm = await startOpenAIDouble([
      (req) => chatReply(JSON.stringify({
        tasks: sent(req).flatMap(({ id, task }) =>
          id === 's1' ? [{ id, task: "Could you tell me bk-014's title?" }]
            : id === 's2' ? [{ id, task: 'Use convert_price on 63.6 USD to JPY.' }]
              : id === 's3' ? [{ id, task: task.replace('"Silent" ', '') }]
                : []),
      })),
    ]);
    const before = structuredClone([TITLE, CONVERT, SEARCH, YEAR]);
    const r = await rephraseTasks(before, TOOLS, { model: 'rewriter', baseURL: llm.baseURL, apiKey: 'k', maxRetries: 0 });
    expect(r.scenarios.map((s) => s.task)).toEqual(["Could you tell me bk-014's title?", CONVERT.task, SEARCH.task, YEAR.task]);
    expect(r.scenarios.map((s) => [s.id, s.checks])).toEqual(before.map((s) => [s.id, s.checks]));
    expect(r.rephrasing).toEqual({ model: 'rewriter', kept: 1, refused: 3, refusedBy: { names_tool: 1, drops_value: 1, missing: 1 } });
    expect(llm.requests).toHaveLength(1);
    expect(llm.requests[0].body.model).toBe('rewriter');
    expect(sent(llm.requests[0]).map((t) => t.task)).toEqual(before.map((s) => s.task));
    // The model is told which tools never to name.
    expect(llm.requests[0].body.messages[0].content).toContain('get_book, convert_price, search_books');
  });

  it('an HTTP error stops the rewording: what was reworded stays, the rest keep their wording, and it says why', async () => {
    const many = Array.from({ length: 14 }, (_, i) => scenario(`t${i}`, `What is the title of the book bk-0${10 + i}?`, 'get_book', { book_id: `bk-0${10 + i}` }, 'x'));
    llm = await startOpenAIDouble([
      (req) => chatReply(JSON.stringify({ tasks: sent(req).map(({ id, task }) => ({ id, task: `Quick question: ${task}` })) })),
      httpError(500, 'the model is overloaded'),
    ]);
    const r = await rephraseTasks(many, TOOLS, { model: 'rewriter', baseURL: llm.baseURL, apiKey: 'k', maxRetries: 0 });
    expect(llm.requests).toHaveLength(2);
    expect(r.scenarios).toHaveLength(14);
    expect(r.scenarios.slice(0, 12).every((s, i) => s.task === `Quick question: ${many[i].task}`)).toBe(true);
    expect(r.scenarios.slice(12)).toEqual(many.slice(12));
    expect(r.rephrasing).toMatchObject({ kept: 12, refused: 0 });
    expect(r.rephrasing.failed).toMatch(/HTTP 500.*overloaded/);
  });
});

describe('mcprl scenarios --offline --generator-model', () => {
  const run = promisify(execFile);
  const mcprl = (args: string[]) =>
    run(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'src', 'cli', 'entry.ts'), ...args], { cwd: REPO_ROOT }).then(
      (r) => ({ code: 0, ...r }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
    );
  const SERVER = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
  const byId = async (dir: string) => {
    const set = await loadScenarioSet(dir);
    return new Map([...set.train, ...set.val].map((s) => [s.id, s]));
  };

  it('rewords the offline set keeping every check, and on an HTTP error writes the set as generated and says so', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-rephrase-'));
    llm = await startOpenAIDouble([], { fallback: (req) => chatReply(JSON.stringify({ tasks: sent(req).map(({ id, task }) => ({ id, task: `Quick question: ${task}` })) })) });
    const args = (out: string) => ['scenarios', '--offline', '--out', path.join(dir, out), '--count', '8', '--seed', '2', '--json', '--generator-base-url', llm!.baseURL, '--generator-model', 'rewriter', ...SERVER];
    const good = await mcprl(args('good'));
    expect(good.code, good.stderr).toBe(0);
    expect(ScenarioSummarySchema.parse(JSON.parse(good.stdout)).rephrasing).toEqual({ model: 'rewriter', kept: 8, refused: 0, refusedBy: {} });

    await llm.close();
    llm = await startOpenAIDouble([], { fallback: httpError(503, 'down for maintenance') });
    const failed = await mcprl(args('failed'));
    expect(failed.code, failed.stderr).toBe(0);
    expect(failed.stderr).toMatch(/rewording stopped \(.*HTTP 503.*\); the tasks not reworded keep their generated wording/);
    expect(JSON.parse(failed.stdout).rephrasing).toMatchObject({ kept: 0, failed: expect.stringMatching(/503/) });

    // The same seed makes the same set: reworded, each task is its generated one with the prefix, checks unchanged.
    const [reworded, generated] = await Promise.all([byId(path.join(dir, 'good')), byId(path.join(dir, 'failed'))]);
    expect(reworded.size).toBe(8);
    expect([...reworded.keys()].sort()).toEqual([...generated.keys()].sort());
    for (const [id, s] of reworded) {
      expect(s.task).toBe(`Quick question: ${generated.get(id)!.task}`);
      expect(s.checks).toEqual(generated.get(id)!.checks);
    }
  }, 240_000);
});
