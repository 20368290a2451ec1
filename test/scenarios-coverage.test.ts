/**
 * Coverage that does not hang on the seed (issue 13): on the real published servers (stdio, from node_modules),
 * every tool the safety policy allows gets a scenario on each of several seeds, because every allowed tool gets a
 * first round of its own before shapes are drawn at random, tools are picked least-tried first, failed arguments are
 * drawn again, and a tool about folders gets folders (a file reader files, a media reader the image). The new task
 * kinds (an image's MIME type, the allowed directory as `{sandbox}`) are run by a scripted oracle, which must pass
 * every check, and by a do-nothing agent, which must pass none; both are scripted policies behind an
 * OpenAI-compatible HTTP double (standing in for a remote model, which cannot run here).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SafetyPolicy } from '../src/mcp/index.js';
import type { OfflineResult } from '../src/scenarios/offline/index.js';
import { checkedCalls } from '../src/scenarios/scenario.js';
import { calledTool, closeDoubles, expectOracleAllIdleNone, generateFor as generate, type Setup } from './helpers/scenario-setups.js';
import { everythingStdioTarget, filesystemTarget, folderWithFilesAndImage, memoryTarget } from './helpers/servers.js';

afterAll(closeDoubles);

/** Tools without a scenario, with their reasons, other than those the policy refuses. */
const uncoveredAllowed = (r: OfflineResult) => r.coverage.filter((c) => c.scenarios === 0 && c.reason !== 'refused_by_policy').map((c) => `${c.tool} (${c.reason})`);

describe('server-filesystem on three text files and a 1×1 PNG: every allowed tool, on every seed', () => {
  for (const allowDestructive of [false, true]) {
    for (const seed of [1, 2]) {
      it(`${allowDestructive ? '--allow-destructive' : 'read-only and non-destructive tools'}, seed ${seed}`, async () => {
        const setup: Setup = { target: filesystemTarget('{sandbox}'), sandboxFrom: folderWithFilesAndImage(), safety: new SafetyPolicy({ allowDestructive }) };
        const r = await generate(setup, 16, seed);
        expect(uncoveredAllowed(r)).toEqual([]);
        const refused = r.coverage.filter((c) => c.reason === 'refused_by_policy').map((c) => c.tool).sort();
        expect(refused).toEqual(allowDestructive ? [] : ['edit_file', 'move_file', 'write_file']);
        // The image is asked about by its MIME type; the allowed directory is the sandbox, as the placeholder.
        const media = r.scenarios.filter((s) => calledTool(s) === 'read_media_file');
        expect(media.some((s) => s.checks?.some((c) => c.kind === 'answer_value' && c.value === 'image/png') && /MIME type/.test(s.task) && /\.png"/.test(s.task))).toBe(true);
        const allowed = r.scenarios.filter((s) => calledTool(s) === 'list_allowed_directories');
        expect(allowed.some((s) => s.checks?.some((c) => (c.kind === 'answer_contains' || c.kind === 'answer_value') && c.value === '{sandbox}'))).toBe(true);
        // A folder tool was given a folder and a file reader a file: none of their calls failed in the end.
        for (const t of ['list_directory', 'read_text_file', 'read_file', 'search_files']) expect(r.coverage.find((c) => c.tool === t)?.scenarios, t).toBeGreaterThan(0);
        if (seed === 1) {
          const asked = [...media, ...allowed];
          await expectOracleAllIdleNone(setup, asked);
        }
      }, 300_000);
    }
  }
});

describe('server-memory on an empty graph: make → use, so its readers, add_observations and create_relations get tasks, on every seed', () => {
  for (const seed of [1, 2]) {
    it(`seed ${seed}`, async () => {
      const setup: Setup = { target: memoryTarget('{sandbox}/memory.jsonl'), sandboxFrom: mkdtempSync(path.join(tmpdir(), 'mcprl-memory-empty-')), safety: new SafetyPolicy({}) };
      const r = await generate(setup, 12, seed);
      expect(uncoveredAllowed(r)).toEqual([]);
      // The readers, a note and a link are used on people the same task adds first; the link joins two of them.
      const chains = r.scenarios.filter((s) => s.checks?.[0]?.kind === 'tool_called' && s.checks[0].tool === 'create_entities' && s.checks[1]?.kind === 'tool_called');
      const used = new Set(chains.map((s) => (s.checks![1].kind === 'tool_called' ? s.checks![1].tool : '')));
      for (const t of ['open_nodes', 'search_nodes', 'read_graph', 'add_observations', 'create_relations']) expect(used.has(t), t).toBe(true);
      for (const s of chains.filter((c) => c.checks![1].kind === 'tool_called' && c.checks![1].tool === 'create_relations')) {
        const made = JSON.stringify(s.checks![0].kind === 'tool_called' ? s.checks![0].args : {});
        const links = checkedCalls(s.checks!)[1].args.relations as { from: string; to: string }[];
        for (const l of links) expect(l.from !== l.to && made.includes(`"${l.from}"`) && made.includes(`"${l.to}"`), JSON.stringify(l)).toBe(true);
      }
      for (const s of r.scenarios) expect(s.task).not.toMatch(/hello world|quarterly report|blue notebook|research notes|project alpha/);
      for (const s of chains) {
        expect(s.checks!.some((c) => c.kind.startsWith('state_'))).toBe(true);
        expect(s.task).toMatch(/[.?] (Then|After that|Next|Once that is done|When that is done|Afterwards|After this),? /);
        expect(s.task).not.toMatch(/[{}[\]]|entityName|entityType/);
      }
      if (seed === 1) {
        await expectOracleAllIdleNone(setup, chains);
      }
    }, 300_000);
  }
});

describe('server-everything under --isolate: long-running, gzip and toggle tools get tasks, on every seed', () => {
  for (const seed of [1, 2]) {
    it(`seed ${seed}`, async () => {
      const setup: Setup = { target: everythingStdioTarget(), safety: new SafetyPolicy({}) };
      const r = await generate(setup, 16, seed);
      // What is left has a precise reason: get-env's answer is the machine's environment, and simulate-research-query
      // is asked to research a topic, which nothing on the server gives but stand-in text.
      expect(uncoveredAllowed(r)).toEqual(['get-env (nothing_to_ask)', 'simulate-research-query (no_discoverable_arguments)']);
      const by = (t: string) => r.scenarios.filter((s) => calledTool(s) === t);
      // The least duration and steps, so it ends within the call timeout.
      expect(by('trigger-long-running-operation').length).toBeGreaterThan(0);
      for (const s of by('trigger-long-running-operation')) expect(checkedCalls(s.checks!)[0]).toMatchObject({ args: { duration: 1, steps: 1 } });
      // A data: URI it can compress without the network; asked about by the resource's MIME type or URI.
      expect(by('gzip-file-as-resource').length).toBeGreaterThan(0);
      for (const s of by('gzip-file-as-resource')) {
        expect(checkedCalls(s.checks!)[0]).toMatchObject({ args: { data: expect.stringMatching(/^data:/) } });
        expect(s.task).toMatch(/MIME type|URI/);
      }
      // A toggle's own answer on a fresh server ("Started"), confirmed on a second fresh server.
      for (const t of ['toggle-simulated-logging', 'toggle-subscriber-updates']) {
        expect(by(t).length, t).toBeGreaterThan(0);
        for (const s of by(t)) expect(s.checks).toContainEqual({ kind: 'answer_contains', value: 'Started' });
      }
      if (seed === 1) {
        const asked = ['trigger-long-running-operation', 'gzip-file-as-resource', 'toggle-simulated-logging', 'toggle-subscriber-updates'].flatMap(by);
        await expectOracleAllIdleNone(setup, asked);
      }
    }, 600_000);
  }
});
