/**
 * Discovery on published servers the project was not built around (real processes from node_modules):
 * server-filesystem on a temp folder with a few files, and server-memory on a seeded memory file copied into a
 * sandbox (and on an empty one). Ground truths must be real results: never an error in disguise.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type McpSession, type ToolCallOutcome } from '../src/mcp/index.js';
import { disguisedError, generateOfflineScenarios, type OfflineResult } from '../src/scenarios/offline/index.js';
import { answerContains, checkedCalls, type Scenario } from '../src/scenarios/scenario.js';
import { filesystemTarget, memoryTarget, SEEDED_MEMORY, folderWithSeededMemory } from './helpers/servers.js';

const calledArgs = (s: Scenario) => checkedCalls(s.checks ?? []);
const expected = (s: Scenario) => (s.checks ?? []).flatMap((c) => (c.kind === 'answer_contains' || c.kind === 'answer_value' ? [c.value] : []));
const covered = (r: OfflineResult) => r.coverage.filter((c) => c.scenarios > 0).map((c) => c.tool);

/** Every scenario's checked calls succeed again with a real result, and hold every expected value. */
async function replayAll(session: McpSession, scenarios: Scenario[]): Promise<void> {
  for (const s of scenarios) {
    let outputs = '';
    for (const c of calledArgs(s)) {
      const out = await session.callTool(c.tool, c.args);
      expect(out.isError, `${s.task}: ${out.text}`).toBe(false);
      expect(disguisedError(out), `${s.task}: ${out.text}`).toBeUndefined();
      outputs += out.text;
    }
    for (const v of expected(s)) expect(answerContains(outputs, v), `${s.task} expects ${v}`).toBe(true);
  }
}

describe('errors in disguise', () => {
  const outcome = (text: string, structuredContent?: unknown): ToolCallOutcome => ({ execution: 'executed', text, isError: false, truncated: false, latencyMs: 1, ...(structuredContent !== undefined ? { structuredContent } : {}) });
  it('are error messages as text, empty results and "no matches", but not real results', () => {
    expect(disguisedError(outcome("Error: ENOENT: no such file or directory, open '/x/morning run'"))).toBe('an error message');
    expect(disguisedError(outcome('morning run: Error - ENOENT', { content: 'morning run: Error - ENOENT' }))).toBe('an error message');
    expect(disguisedError(outcome('{"entities": [], "relations": []}'))).toBe('an empty result');
    expect(disguisedError(outcome('No matches found', { content: 'No matches found' }))).toBe('an error message');
    expect(disguisedError(outcome(''))).toBe('an empty result');
    expect(disguisedError(outcome('{"entities": [{"name": "Ada"}], "relations": []}'))).toBeUndefined();
    expect(disguisedError(outcome('buy milk', { content: 'buy milk' }))).toBeUndefined();
  });
});

describe('server-filesystem on a folder with a few files', () => {
  let session: McpSession;
  let root: string;
  let r: OfflineResult;
  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), 'mcprl-fs-discovery-'));
    mkdirSync(path.join(root, 'notes'));
    writeFileSync(path.join(root, 'todo.txt'), 'buy milk\n');
    writeFileSync(path.join(root, 'readme.md'), '# Garden\nTomatoes need sun.\n');
    writeFileSync(path.join(root, 'notes', 'plants.json'), '{"name": "basil", "height_cm": 30}\n');
    session = await connect(filesystemTarget(root));
    r = await generateOfflineScenarios(session, { count: 20, seed: 3 });
  });
  afterAll(async () => session?.close());

  it('finds the files from the root folder and uses only paths that exist', () => {
    // A read with nothing to ask about makes no task, so a few of the 20 asked for may be missing.
    expect(r.scenarios.length).toBeGreaterThanOrEqual(16);
    const paths = r.scenarios.flatMap((s) => calledArgs(s).flatMap((c) => [c.args.path, ...((c.args.paths as unknown[]) ?? [])])).filter((p) => p !== undefined);
    expect(paths.length).toBeGreaterThan(10);
    for (const p of paths) expect(existsSync(String(p)), String(p)).toBe(true);
    // Files below the root were reached through a listing, not only the root itself.
    expect(paths).toEqual(expect.arrayContaining([path.join(root, 'notes', 'plants.json')]));
  });

  it('covers most read-only tools, and every ground truth is a real result', async () => {
    expect(covered(r).length).toBeGreaterThanOrEqual(6);
    expect(covered(r)).toEqual(expect.arrayContaining(['read_text_file', 'get_file_info', 'search_files']));
    for (const v of r.scenarios.flatMap(expected)) expect(v).not.toMatch(/ENOENT|no such file|no matches|error/i);
    await replayAll(session, r.scenarios);
  });
});

describe('server-memory', () => {
  it('on a seeded memory file (copied into a sandbox): tasks about the entities that exist, the file untouched', async () => {
    const seed = folderWithSeededMemory();
    const session = await connect(memoryTarget('{sandbox}/memory.jsonl'), { sandboxFrom: seed });
    try {
      const r = await generateOfflineScenarios(session, { count: 20, seed: 1 });
      expect(r.scenarios.length).toBeGreaterThanOrEqual(10);
      expect(covered(r).sort()).toEqual(['open_nodes', 'read_graph', 'search_nodes']);
      const names = new Set(['Ada Lovelace', 'Analytical Engine', 'Charles Babbage']);
      const opened = r.scenarios.flatMap((s) => calledArgs(s).filter((c) => c.tool === 'open_nodes').flatMap((c) => c.args.names as string[]));
      expect(opened.length).toBeGreaterThan(0);
      for (const n of opened) expect(names.has(n), n).toBe(true);
      // Required arrays and objects were filled with discovered values, and the answers come from the seeded data.
      expect(r.scenarios.flatMap(expected).some((v) => ['machine', 'person', 'designed by Charles Babbage', 'wrote notes on'].includes(v))).toBe(true);
      expect(r.coverage.find((c) => c.tool === 'create_entities')).toMatchObject({ scenarios: 0, reason: 'writes_state' });
      await replayAll(session, r.scenarios);
    } finally {
      await session.close();
    }
    expect(readFileSync(path.join(seed, 'memory.jsonl'), 'utf8')).toBe(SEEDED_MEMORY);
  });

  it('on an empty graph: no task about names that do not exist, and the report says why', async () => {
    const session = await connect(memoryTarget('{sandbox}/memory.jsonl'));
    try {
      const r = await generateOfflineScenarios(session, { count: 10, seed: 1, maxAttempts: 60 });
      expect(r.scenarios).toEqual([]);
      for (const tool of ['read_graph', 'open_nodes']) {
        expect(r.coverage.find((c) => c.tool === tool)).toMatchObject({ scenarios: 0, reason: 'calls_failed' });
      }
      // Nothing on the server to search for, and stand-in text is no query of its own.
      expect(r.coverage.find((c) => c.tool === 'search_nodes')).toMatchObject({ scenarios: 0, reason: 'no_discoverable_arguments' });
    } finally {
      await session.close();
    }
  });
});
