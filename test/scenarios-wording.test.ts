/**
 * Tasks a person would write (issue 45 §1), on the published server-memory and server-filesystem with the demo's data
 * and on the 7-tool library server: no task names a tool or an argument key, in words or as written; every read-only
 * task asks a question its checks can judge; written values come from the server's own data (never stand-in text);
 * a media reader gets media only; and server-memory's find-then-act tasks are phrased as one request. The quality
 * table's oracle passes, and a do-nothing agent fails, every read-only task.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedTarget, writeTargetInputs } from '../scripts/demo-targets.js';
import { connect, SafetyPolicy, type Target, type ToolInfo } from '../src/mcp/index.js';
import { measureQuality } from '../src/ruler/quality.js';
import { toolNaming } from '../src/scenarios/naming.js';
import { FILLER_WORDS } from '../src/scenarios/json-schema-args.js';
import { chooseAnswer } from '../src/scenarios/offline/answer.js';
import { generateOfflineScenarios, type OfflineResult } from '../src/scenarios/offline/index.js';
import { question, questionFill, subjectOf } from '../src/scenarios/offline/phrasing.js';
import { templateRenderer, TEMPLATES } from '../src/scenarios/offline/wording.js';
import { createRng } from '../src/util/rng.js';
import { checkedCalls, isStateCheck, type Scenario } from '../src/scenarios/scenario.js';
import { discover } from '../src/scenarios/offline/discovery.js';
import { startGeneration } from '../src/scenarios/offline/generation.js';
import { writeArgs } from '../src/scenarios/offline/write.js';
import { everythingStdioTarget, filesystemTarget, fixtureStdioTarget, folderWithFiles, folderWithFilesAndImage, memoryTarget, tsStdioTarget, REPO_ROOT, USER_FILES_WITH_IMAGE, folderWithSeededMemory } from './helpers/servers.js';

interface Made {
  result: OfflineResult;
  tools: ToolInfo[];
  quality: Awaited<ReturnType<typeof measureQuality>>;
}

/**
 * Offline scenarios for a target (write tasks replayed on isolated servers: sandboxes, or fresh processes of a target
 * that keeps its state in memory), with its tools and quality table.
 */
async function make(target: Target, count: number, seed: number, sandboxFrom?: string, stateInMemory = false): Promise<Made> {
  const opts = { sandboxFrom, stateInMemory, policy: new SafetyPolicy({}) };
  const session = await connect(target, opts);
  try {
    const result = await generateOfflineScenarios(session, { count, seed, isolatedServer: sandboxFrom || stateInMemory ? () => connect(target, { ...opts, isolated: true }) : undefined });
    return { result, tools: await session.listTools(), quality: await measureQuality(session, result.scenarios) };
  } finally {
    await session.close();
  }
}

async function demoTarget(name: 'memory' | 'filesystem'): Promise<{ target: Target; source: string }> {
  const t = publishedTarget(name);
  const { source } = await writeTargetInputs(t, await mkdtemp(path.join(tmpdir(), `mcprl-wording-${name}-`)));
  return { target: { kind: 'stdio', command: t.server.command, args: t.server.args, env: t.server.env, cwd: REPO_ROOT }, source };
}

const isFiller = (v: string) => FILLER_WORDS.some((w) => v.toLowerCase().includes(w));
const strings = (v: unknown): string[] => (typeof v === 'string' ? [v] : Array.isArray(v) ? v.flatMap(strings) : v && typeof v === 'object' ? Object.values(v).flatMap(strings) : []);

/** What every generated set must hold, whatever the server. */
function expectPersonWritten(m: Made): void {
  const { scenarios } = m.result;
  expect(scenarios.length).toBeGreaterThan(8);
  for (const s of scenarios) {
    expect(toolNaming(s.task, m.tools), s.task).toBeUndefined();
    // Every value a checked call is given is the server's own or made from it, never stand-in text.
    for (const c of checkedCalls(s.checks ?? [])) expect(strings(c.args).filter(isFiller), s.task).toEqual([]);
    // A read-only task is a question with an answer to judge: never "run this" checked by the call alone.
    if (!s.checks?.some(isStateCheck)) expect(s.checks?.some((c) => c.kind === 'answer_value' || c.kind === 'answer_contains'), s.task).toBe(true);
    expect(s.task).not.toMatch(/entitys|the name of the trees|when you directory tree/);
    // A value is said with what it is ('the "debug" type'), never bare at the end ('for "debug"').
    expect(s.task).not.toMatch(/\bfor "[^"]*"[?.]?$/);
    // No conversion to the unit the amount is in ("the price in USD of 71 USD", "71 USD in USD").
    expect(s.task).not.toMatch(/\b([A-Z]{3}) of [\d.]+ \1\b|\b[\d.]+ ([A-Z]{3}) in \2\b/);
    expect(s.task).not.toMatch(/\bWhich are the\b|\bby its name\b|\bnew state now\b/);
    // What a write made is named when it is looked up again, never a bare "it" after adding several things.
    expect(s.task).not.toMatch(/\bthat it (is there|shows up)\b|\blook it up\b|\bcheck it again\b|\bdouble-check it\b|\blook at it to see\b/);
    // A search's own count is the search's, never one record's ("the total number of matches of the book matching").
    expect(s.task).not.toMatch(/\b(matches|results|hits) of the [a-z]+[^s] (of|matching|in)\b/);
    // A question says what it found once: a follow-up refers back to it ("…, and report the rate of it in EUR").
    if (!s.checks?.some(isStateCheck)) for (const q of new Set(s.task.match(/"[^"]+"/g) ?? [])) expect(s.task.split(q).length, s.task).toBe(2);
  }
  expect(m.quality).toMatchObject({ namingTool: 0 });
  expect(m.quality.oraclePassIdleFail).toBe(m.quality.measured);
}

const calls = (ss: Scenario[], tool: string) => ss.flatMap((s) => checkedCalls(s.checks ?? []).filter((c) => c.tool === tool));

describe('offline tasks in a person\'s words', () => {
  it('server-memory (the demo\'s graph): plain requests with values from the graph, and find-then-act chains', async () => {
    const { target, source } = await demoTarget('memory');
    const m = await make(target, 24, 3, source);
    expectPersonWritten(m);
    const ss = m.result.scenarios;
    // New entities take a type in use and notes that things of that type have; relations join existing entities by a
    // relation type in use.
    const graph = publishedTarget('memory').files['memory.jsonl'] as string;
    for (const c of calls(ss, 'create_entities')) for (const e of (c.args.entities as { entityType: string }[])) expect(['person', 'project', 'place']).toContain(e.entityType);
    for (const c of calls(ss, 'create_relations')) {
      for (const r of c.args.relations as { from: string; to: string; relationType: string }[]) {
        expect(graph).toContain(`"name":"${r.from}"`);
        expect(graph).toContain(`"name":"${r.to}"`);
        expect(['manages', 'owns', 'works on', 'works at']).toContain(r.relationType);
      }
    }
    // A change is asked once (no relation twice in one request); notes added to a thing are of its kind's.
    for (const c of calls(ss, 'create_relations')) expect(new Set((c.args.relations as unknown[]).map((r) => JSON.stringify(r))).size).toBe((c.args.relations as unknown[]).length);
    const entities = graph.trim().split('\n').map((l) => JSON.parse(l) as { type: string; name: string; entityType: string; observations: string[] }).filter((e) => e.type === 'entity');
    const kindOf = new Map(entities.map((e) => [e.name, e.entityType]));
    for (const c of calls(ss, 'add_observations')) {
      for (const o of c.args.observations as { entityName: string; contents: string[] }[]) {
        if (!kindOf.has(o.entityName)) continue;
        const notesOfKind = entities.filter((e) => e.entityType === kindOf.get(o.entityName)).flatMap((e) => e.observations);
        for (const note of o.contents) expect(notesOfKind, `${note} → ${o.entityName}`).toContain(note);
      }
    }
    // A chain names its entity by what is noted about it, in one request.
    const chains = ss.filter((s) => s.difficulty >= 2 && / noted as "/.test(s.task));
    expect(chains.length, ss.map((s) => s.task).join('\n')).toBeGreaterThan(0);
  }, 300_000);

  it('server-filesystem (the demo\'s notes): questions about files and folders, media for the media reader', async () => {
    const { target, source } = await demoTarget('filesystem');
    const m = await make(target, 20, 1, source);
    expectPersonWritten(m);
    const ss = m.result.scenarios;
    for (const c of calls(ss, 'read_media_file')) expect(c.args.path).toMatch(/\.png$/);
    // A file is asked about by what it says, with no optional argument it does not need (no "tail 77").
    for (const c of [...calls(ss, 'read_text_file'), ...calls(ss, 'read_file')]) expect(Object.keys(c.args)).toEqual(['path']);
    // A folder made is named from what the folder's files say, never stand-in text.
    for (const c of calls(ss, 'create_directory')) expect(c.args.path).toMatch(/^\{sandbox\}(\/trips)?\/[a-z]{5,12}$/);
  }, 300_000);

  it('server-filesystem: a JSON file\'s fields are asked as what the file holds, its size as the file\'s own', async () => {
    const { target, source } = await demoTarget('filesystem');
    const session = await connect(target, { sandboxFrom: source, policy: new SafetyPolicy({}) });
    try {
      const tools = new Map((await session.listTools()).map((t) => [t.name, t]));
      const [root] = (await session.callTool('list_allowed_directories', {})).text.split('\n').slice(1);
      const ask = async (tool: string) => {
        const args = { path: `${root.trim()}/budget.json` };
        const answer = chooseAnswer(await session.callTool(tool, args), args, tools.get(tool)!, createRng(2));
        return questionFill(answer!, 'the file').fill;
      };
      const held = await ask('read_text_file');
      expect(held).toMatchObject({ of: 'in' });
      // An amount of money in the file ("groceries": 420) is no count of groceries.
      expect(held.field).not.toMatch(/^number of/);
      expect(await ask('get_file_info')).toMatchObject({ of: 'of' });
    } finally {
      await session.close();
    }
  }, 60_000);

  it('server-filesystem: the text a write puts in a file is a line of the folder\'s files, never another key\'s value', async () => {
    const session = await connect(filesystemTarget('{sandbox}'), { sandboxFrom: folderWithFilesAndImage(), policy: new SafetyPolicy({ allowDestructive: true }) });
    try {
      const lines = Object.values(USER_FILES_WITH_IMAGE).filter((v) => typeof v === 'string').flatMap((t) => t.split('\n').map((l) => l.trim()));
      const write = (await session.listTools()).find((t) => t.name === 'write_file')!;
      const made = [];
      for (const seed of [1, 2, 3, 4, 5]) {
        const g = await startGeneration(session, { seed });
        const args = writeArgs(g, await discover(g), write);
        if (args) made.push(args);
      }
      expect(made.length).toBeGreaterThan(0);
      // A listing's "file" type written into todo.md ('Write "file" to the file …') is no change a person asks for.
      for (const args of made) expect(lines, JSON.stringify(args)).toContain(args.content);
    } finally {
      await session.close();
    }
  }, 120_000);

  it('server-filesystem with no image: no media task, and the coverage line says why', async () => {
    const m = await make(filesystemTarget('{sandbox}'), 12, 1, folderWithFiles());
    expectPersonWritten(m);
    expect(calls(m.result.scenarios, 'read_media_file')).toEqual([]);
    expect(m.result.coverage.find((c) => c.tool === 'read_media_file')).toMatchObject({ scenarios: 0, reason: 'no_discoverable_arguments', detail: 'no image or audio file found' });
  }, 300_000);

  it('the library server: questions about books, members and branches, chains by title', async () => {
    const m = await make(tsStdioTarget(path.join(REPO_ROOT, 'test', 'helpers', 'library-server.ts')), 20, 1);
    expectPersonWritten(m);
    expect(m.quality.chains).toBeGreaterThan(0);
    // A count is asked as one: "the number of copies", never "the copies".
    const counts = m.result.scenarios.filter((s) => /\b(copies|holds)\b/.test(s.task));
    expect(counts.length).toBeGreaterThan(0);
    for (const s of counts) expect(s.task).toMatch(/\bnumber of (copies|holds)\b/);
  }, 300_000);

  it('the bookshop: conversions to another currency, said as such; a filter said with what it filters', async () => {
    const m = await make(fixtureStdioTarget(), 24, 1, undefined, true);
    expectPersonWritten(m);
    const ss = m.result.scenarios;
    const conversions = calls(ss, 'convert_price');
    expect(conversions.length).toBeGreaterThan(0);
    for (const c of conversions) expect(c.args.currency).not.toBe('USD');
    // A conversion asked outright states its amount (a chain finds it: a price).
    for (const s of ss.filter((x) => x.difficulty <= 2 && checkedCalls(x.checks ?? []).some((c) => c.tool === 'convert_price'))) {
      const c = checkedCalls(s.checks ?? []).find((x) => x.tool === 'convert_price')!;
      expect(s.task).toContain(`${c.args.amount as number} USD in ${c.args.currency as string}`);
    }
    const genres = ss.filter((s) => calls([s], 'search_books').some((c) => typeof c.args.genre === 'string'));
    expect(genres.length, ss.map((s) => s.task).join('\n')).toBeGreaterThan(0);
    for (const s of genres) expect(s.task).toContain(`"${calls([s], 'search_books')[0].args.genre as string}" genre`);
  }, 300_000);

  it('a list is asked as the field of each thing, never "each of the books, by title"', () => {
    const fill = { fields: 'titles', field: 'title', subject: 'the books matching "Last"' };
    for (const [i, tpl] of TEMPLATES.list.entries()) {
      const task = templateRenderer(createRng(1), { index: i, of: TEMPLATES.list.length })('list', fill);
      expect(task, tpl).toMatch(/\btitles?\b/);
      expect(task, tpl).not.toMatch(/\bby title\b/);
    }
  });

  it('the bookshop: a search\'s own count is asked of the search ("How many books … are there?")', async () => {
    const session = await connect(fixtureStdioTarget(), { policy: new SafetyPolicy({}) });
    try {
      const search = (await session.listTools()).find((t) => t.name === 'search_books')!;
      const args = { query: 'the', genre: 'fiction' };
      const out = await session.callTool('search_books', args);
      const total = String((JSON.parse(out.text) as { total_matches: number }).total_matches);
      // The answer drawn from the reply varies with the seed; the seeds that draw the count are what is looked at.
      const counts = Array.from({ length: 40 }, (_, i) => chooseAnswer(out, args, search, createRng(i + 1))).filter((a) => a?.kind === 'field' && a.values[0] === total && /match/.test(a.field));
      expect(counts.length).toBeGreaterThan(0);
      for (const a of counts) {
        const q = question(search, args, a!, () => false)!;
        expect(q).toMatchObject({ family: 'count', fill: { things: 'books of the "fiction" genre matching "the"' } });
        for (let i = 0; i < TEMPLATES.count.length; i++) {
          const task = templateRenderer(createRng(i), undefined)(q.family, q.fill);
          expect(task).toMatch(/(how many|number of|count the) books of the "fiction" genre matching "the"/i);
        }
      }
    } finally {
      await session.close();
    }
  }, 60_000);

  it('server-memory: what a relation of a named entity says is asked of the relation, never as the entity\'s own', async () => {
    const seeded = folderWithSeededMemory();
    const session = await connect(memoryTarget('{sandbox}/memory.jsonl'), { policy: new SafetyPolicy({}), sandboxFrom: seeded });
    try {
      const open = (await session.listTools()).find((t) => t.name === 'open_nodes')!;
      const args = { names: ['Ada Lovelace'] };
      const out = await session.callTool('open_nodes', args);
      // The answer drawn from the reply varies with the seed: Ada's own type ("person") and her relation's ("wrote notes on").
      const answers = Array.from({ length: 40 }, (_, i) => chooseAnswer(out, args, open, createRng(i + 1))!);
      const ask = (value: string) => answers.filter((a) => a.values.includes(value)).map((a) => templateRenderer(createRng(1), undefined)(question(open, args, a, () => false)!.family, question(open, args, a, () => false)!.fill));
      expect(ask('wrote notes on').length).toBeGreaterThan(0);
      for (const task of ask('wrote notes on')) expect(task).toMatch(/\bthe relation of "Ada Lovelace"/);
      expect(ask('person').length).toBeGreaterThan(0);
      for (const task of ask('person')) expect(task).toMatch(/type of "Ada Lovelace"/);
    } finally {
      await session.close();
    }
  }, 60_000);

  it('server-everything: its real tools and replies, said with what their values are', async () => {
    // Generating a whole set here takes minutes (its slow tools); its phrasing is checked on its own tools and replies.
    const session = await connect(everythingStdioTarget(), { policy: new SafetyPolicy({}) });
    try {
      const tools = new Map((await session.listTools()).map((t) => [t.name, t]));
      const say = (name: string, args: Record<string, unknown>, noun?: string) => subjectOf(tools.get(name)!, args, { noun, isFolder: () => false })?.subject;
      expect(say('echo', { message: 'Cloudy' })).toBe('the echo of the "Cloudy" message');
      expect(say('get-annotated-message', { messageType: 'debug' })).toBe('the annotated message of the "debug" type');
      // The weather tool is "structured content", no noun a person asks about: the place is what is asked of.
      expect(say('get-structured-content', { location: 'Chicago' })).toBe('Chicago');
      const rng = createRng(1);
      const links = chooseAnswer(await session.callTool('get-resource-links', {}), {}, tools.get('get-resource-links')!, rng);
      expect(links).toMatchObject({ kind: 'values', field: 'URIs', noun: 'resource' });
      expect(questionFill(links!, say('get-resource-links', {}, 'resource')!).fill).toMatchObject({ field: 'URIs', subject: 'the resource links' });
    } finally {
      await session.close();
    }
  }, 60_000);
});
