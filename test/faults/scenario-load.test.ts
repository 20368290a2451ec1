/**
 * §2 of issue 12: scenarios that would silently score as failures are refused when loaded, with file:line — a
 * check of a tool the server does not have (the real fixture server decides which tools exist), and duplicate ids.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkUniqueIds, loadScenarioSet, readScenarios, type Scenario } from '../../src/scenarios/scenario.js';
import { FIXTURE_SERVER_MAIN, freePort, REPO_ROOT } from '../helpers/servers.js';
import { mcprl } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let work: string;

const sc = (id: string, tool = 'get_book'): Scenario => ({ id, task: `Look up book ${id}.`, difficulty: 1, source: 'schema', checks: [{ kind: 'tool_called', tool, args: { book_id: 'bk-001' } }] });
const jsonl = (xs: Scenario[]) => xs.map((x) => JSON.stringify(x)).join('\n') + '\n';

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-scen-'));
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

const onFixture = (args: string[]) => mcprl([...args, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN]);

describe('scenario files', () => {
  it('duplicate ids are refused with the file and line of both', async () => {
    const file = path.join(work, 'dups.jsonl');
    await writeFile(file, jsonl([sc('a'), sc('b'), sc('a')]));
    await expect(readScenarios(file)).rejects.toThrow(`${file}:3: duplicate scenario id "a" (first at ${file}:1)`);
    const set = path.join(work, 'set');
    await mkdir(set, { recursive: true });
    await writeFile(path.join(set, 'train.jsonl'), jsonl([sc('a'), sc('b')]));
    await writeFile(path.join(set, 'val.jsonl'), jsonl([sc('c'), sc('b')]));
    const { train, val } = await loadScenarioSet(set);
    expect(() => checkUniqueIds([...train, ...val])).toThrow(`${path.join(set, 'val.jsonl')}:2: duplicate scenario id "b" (first at ${path.join(set, 'train.jsonl')}:2)`);
    fault('duplicate scenario ids', 'refused at load with file:line', 'refused, both lines named');
  });

  it('`mcprl eval` refuses a scenario that checks a tool the server does not have, before any rollout', async () => {
    const dir = path.join(work, 'eval-set');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'train.jsonl'), jsonl([sc('ok'), sc('typo', 'get_bok')]));
    await writeFile(path.join(dir, 'val.jsonl'), '');
    // The policy endpoint is a closed port: the refusal must come before any request to it.
    const r = await onFixture(['eval', '--scenarios', dir, '--model-base-url', `http://127.0.0.1:${await freePort()}/v1`, '--model', 'm', '--out', path.join(work, 'eval-out')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${path.join(dir, 'train.jsonl')}:2: scenario "typo" checks tool "get_bok", which the server does not have`);
    fault('scenario checks a tool the server lacks (eval)', 'refused with file:line', 'refused before any rollout');
  });

  it('`mcprl train` refuses it too, before step 0', async () => {
    const dir = path.join(work, 'train-set');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'train.jsonl'), jsonl([sc('t1'), sc('t2')]));
    await writeFile(path.join(dir, 'val.jsonl'), jsonl([{ ...sc('v1', 'find_books_by_colour'), task: 'Find red books.' }]));
    const r = await onFixture(['train', '--model', MODEL, '--scenarios', dir, '--run', 'r', '--runs-dir', path.join(work, 'runs'), '--quiet']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${path.join(dir, 'val.jsonl')}:1: scenario "v1" checks tool "find_books_by_colour", which the server does not have`);
    fault('scenario checks a tool the server lacks (train)', 'refused before step 0', 'refused before step 0');
  });
});
