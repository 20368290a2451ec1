/**
 * The tools that had no scenario, and find → act chains, on the real servers (the bookshop fixture, server-filesystem
 * and server-memory from node_modules; stdio, every write in a per-server sandbox):
 * - place_order: amounts asked for in a write are small, so the order is not refused for want of stock;
 * - edit_file: the text to replace is a line of the file that discovery read; search_files: a glob built from a
 *   discovered file name; create_directory: a new folder beside the discovered files, shown by a listing;
 * - chains: a task names its entity by a clue (an observation only that entity has, a line only that file holds),
 *   so the agent must search or read before it inspects or changes it.
 * A scripted oracle (the checked calls) passes every check and a do-nothing agent none. The agents are scripted
 * policies behind an OpenAI-compatible HTTP double (it stands in for a remote model, which cannot run here).
 */
import { readFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { publishedTarget, writeTargetInputs } from '../scripts/demo-targets.js';
import { SafetyPolicy } from '../src/mcp/index.js';
import { checkedCalls, type Scenario } from '../src/scenarios/scenario.js';
import { calledTool, closeDoubles, expectOracleAllIdleNone, generateFor, type Setup } from './helpers/scenario-setups.js';
import { filesystemTarget, fixtureStdioTarget, folderWithFiles, memoryTarget, SEEDED_MEMORY, folderWithSeededMemory } from './helpers/servers.js';

afterAll(closeDoubles);

const generate = async (s: Setup, count: number, seed: number): Promise<Scenario[]> => (await generateFor(s, count, seed, { maxAttempts: count * 6 })).scenarios;
const hasState = (s: Scenario) => (s.checks ?? []).some((c) => c.kind.startsWith('state_'));

describe('tools that had no scenario', () => {
  it('place_order (fixture): an order of a few copies, checked by the stock it took', async () => {
    const setup: Setup = { target: fixtureStdioTarget(), safety: new SafetyPolicy() };
    const orders = (await generate(setup, 24, 1)).filter((s) => calledTool(s) === 'place_order');
    expect(orders.length).toBeGreaterThan(0);
    for (const s of orders) {
      const call = s.checks![0];
      if (call.kind !== 'tool_called') throw new Error('shape');
      for (const it of call.args.items as { quantity: number }[]) expect(it.quantity).toBeLessThanOrEqual(3);
      expect(s.checks!.some((c) => c.kind === 'state_number')).toBe(true);
    }
    await expectOracleAllIdleNone(setup, orders);
  }, 300_000);

  it('edit_file, search_files and create_directory (server-filesystem with --allow-destructive)', async () => {
    const user = folderWithFiles();
    const setup: Setup = { target: filesystemTarget('{sandbox}'), sandboxFrom: user, safety: new SafetyPolicy({ allowDestructive: true }) };
    const made = await generate(setup, 40, 1);
    const of = (t: string) => made.filter((s) => calledTool(s) === t);
    const content = { '{sandbox}/notes.txt': 'Shopping: apples, pears, walnuts.', '{sandbox}/todo.md': '# Todo\n- call the plumber\n- renew passport' };
    expect(of('edit_file').length).toBeGreaterThan(0);
    for (const s of of('edit_file')) {
      const call = s.checks![0];
      if (call.kind !== 'tool_called') throw new Error('shape');
      // The text replaced is a line of the file, as discovery read it.
      const file = content[call.args.path as keyof typeof content];
      for (const e of call.args.edits as { oldText: string }[]) expect(file.split('\n')).toContain(e.oldText);
      expect(hasState(s)).toBe(true);
    }
    expect(of('create_directory').length).toBeGreaterThan(0);
    for (const s of of('create_directory')) expect(s.checks).toContainEqual(expect.objectContaining({ kind: 'state_contains', tool: 'list_directory', args: { path: '{sandbox}' } }));
    expect(of('search_files').length).toBeGreaterThan(0);
    for (const s of of('search_files')) {
      expect(s.checks!.some((c) => (c.kind === 'answer_contains' || c.kind === 'answer_value') && /^\{sandbox\}\/\w+\.\w+$/.test(c.value))).toBe(true);
      // Worded as other lookups are: the paths of the files found, not "the exact response".
      expect(s.task).toMatch(/paths of the files named /);
      expect(s.task).not.toMatch(/exact response/);
    }
    const checked = [...of('edit_file'), ...of('create_directory'), ...of('search_files')];
    await expectOracleAllIdleNone(setup, checked);
    expect(readFileSync(path.join(user, 'notes.txt'), 'utf8')).toBe('Shopping: apples, pears, walnuts.\n');
  }, 400_000);
});

describe('find → act chains on the published servers', () => {
  it('server-memory, seeded: the entity named by an observation only it has; searched for, then opened or changed', async () => {
    const seed = folderWithSeededMemory();
    const setup: Setup = { target: memoryTarget('{sandbox}/memory.jsonl'), sandboxFrom: seed, safety: new SafetyPolicy() };
    const chains = (await generate(setup, 40, 1)).filter((s) => / noted as "/.test(s.task));
    expect(chains.length).toBeGreaterThan(1);
    expect(chains.some((s) => calledTool(s) === 'add_observations' && hasState(s))).toBe(true);
    for (const s of chains) {
      expect(s.difficulty).toBeGreaterThanOrEqual(3);
      // The entity's name is not in the task: the agent has to find it from the clue.
      const call = checkedCalls(s.checks!)[0];
      const names = JSON.stringify(call).match(/Ada Lovelace|Analytical Engine|Charles Babbage/g) ?? [];
      expect(names.some((n) => !s.task.includes(n)), s.task).toBe(true);
    }
    await expectOracleAllIdleNone(setup, chains);
    expect(readFileSync(path.join(seed, 'memory.jsonl'), 'utf8')).toBe(SEEDED_MEMORY);
  }, 400_000);

  it('server-filesystem: the file named by a line only it holds; read, then inspected or edited', async () => {
    const setup: Setup = { target: filesystemTarget('{sandbox}'), sandboxFrom: folderWithFiles(), safety: new SafetyPolicy({ allowDestructive: true }) };
    const chains = (await generate(setup, 40, 2)).filter((s) => /the file in "{sandbox}" that contains the line "/.test(s.task));
    expect(chains.length).toBeGreaterThan(0);
    for (const s of chains) {
      expect(s.difficulty).toBeGreaterThanOrEqual(3);
      expect(s.task).not.toMatch(/notes\.txt|todo\.md|config\.json/);
    }
    await expectOracleAllIdleNone(setup, chains);
  }, 400_000);

  it('server-filesystem (the demo\'s notes): a chain names its file by a line the request does not already quote', async () => {
    const { source } = await writeTargetInputs(publishedTarget('filesystem'), await mkdtemp(path.join(tmpdir(), 'mcprl-find-edit-')));
    const setup: Setup = { target: filesystemTarget('{sandbox}'), sandboxFrom: source, safety: new SafetyPolicy({ allowDestructive: true }) };
    const chains = (await generate(setup, 40, 1)).filter((s) => /that contains the line "/.test(s.task));
    expect(chains.some((s) => calledTool(s) === 'edit_file')).toBe(true);
    // "replace "## Lentil soup" with … in the file that contains the line "## Lentil soup"" quotes its clue twice.
    for (const s of chains) for (const q of new Set(s.task.match(/"[^"]+"/g))) expect(s.task.split(q).length, s.task).toBe(2);
  }, 400_000);
});
