import { mkdtemp, readdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  answerContains,
  argsMatch,
  loadScenarioSet,
  readScenarios,
  writeScenarioSet,
  type Scenario,
} from '../src/scenarios/scenario.js';

const a: Scenario = {
  id: 's-1',
  task: 'Find the book with id bk-001 and tell me its title.',
  difficulty: 1,
  source: 'schema',
  checks: [
    { kind: 'tool_called', tool: 'get_book', args: { book_id: 'bk-001' } },
    { kind: 'answer_contains', value: 'The Quiet Orchard' },
  ],
};
const b: Scenario = { id: 's-2', task: 'Which authors come from Chile?', difficulty: 2, source: 'llm' };

describe('scenario files', () => {
  it('round-trips a set through train.jsonl / val.jsonl and leaves no temp files', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-scn-'));
    await writeScenarioSet(path.join(dir, 'set'), [a, b], [b]);
    expect((await readdir(path.join(dir, 'set'))).sort()).toEqual(['train.jsonl', 'val.jsonl']);
    const set = await loadScenarioSet(path.join(dir, 'set'));
    expect(set.train).toEqual([a, b]);
    expect(set.val).toEqual([b]);
  });

  it('names file, line and field on a bad line', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-scn-'));
    const file = path.join(dir, 'bad.jsonl');
    await writeFile(file, JSON.stringify(a) + '\n\n' + JSON.stringify({ ...b, difficulty: 9 }) + '\n');
    await expect(readScenarios(file)).rejects.toThrow(`${file}:3: field difficulty`);
    await writeFile(file, '{"id":"x",\n');
    await expect(readScenarios(file)).rejects.toThrow(`${file}:1: invalid JSON`);
    await writeFile(file, JSON.stringify({ ...a, checks: [{ kind: 'tool_called', args: {} }] }) + '\n');
    await expect(readScenarios(file)).rejects.toThrow(`${file}:1: field checks.0.tool`);
  });
});

describe('argsMatch', () => {
  it('matches subsets recursively and rejects mismatches', () => {
    expect(argsMatch({ book_id: 'bk-001' }, { book_id: 'bk-001', extra: 1 })).toBe(true);
    expect(argsMatch({ book_id: 'bk-001' }, { book_id: 'BK-001 ' })).toBe(true);
    expect(argsMatch({ book_id: 'bk-001' }, { book_id: 'bk-002' })).toBe(false);
    expect(argsMatch({ book_id: 'bk-001' }, {})).toBe(false);
    expect(argsMatch({ amount: 12 }, { amount: '12' })).toBe(true);
    expect(argsMatch({ amount: 12 }, { amount: 12.5 })).toBe(false);
    expect(argsMatch({ c: { name: 'Ann' } }, { c: { name: 'ann', email: 'a@b.c' } })).toBe(true);
    expect(argsMatch({ c: { name: 'Ann' } }, { c: 'Ann' })).toBe(false);
    expect(argsMatch({ items: [{ id: 1 }] }, { items: [{ id: 1, q: 2 }] })).toBe(true);
    expect(argsMatch({ items: [{ id: 1 }] }, { items: [{ id: 1 }, { id: 2 }] })).toBe(false);
    expect(argsMatch({ flag: true }, { flag: 'true' })).toBe(false);
    expect(argsMatch({}, { anything: 1 })).toBe(true);
  });
});

describe('answerContains', () => {
  it('normalises case, whitespace and thousands separators', () => {
    expect(answerContains('The title is  THE QUIET\norchard.', 'The Quiet Orchard')).toBe(true);
    expect(answerContains('It costs 1,234.50 yen', '1234.50')).toBe(true);
    expect(answerContains('It costs 12 dollars', '13')).toBe(false);
  });
});
