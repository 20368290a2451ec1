/**
 * Sandboxed state, against the real published server-memory and server-filesystem (stdio, from node_modules).
 * The agent is a scripted policy behind an OpenAI-compatible HTTP double (it stands in for a remote model, which
 * cannot run here) that calls the servers' write tools. The user's data must come out byte-identical.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { OpenAIPolicy } from '../src/agent/policy.js';
import { rolloutGroups } from '../src/agent/rollout-groups.js';
import type { McpTrajectory } from '../src/agent/trajectory.js';
import { SafetyPolicy, unisolatedWriteRefusal } from '../src/mcp/index.js';
import type { Scenario } from '../src/scenarios/scenario.js';
import type { OpenAIDouble } from './doubles/openai-double.js';
import { scriptedStrategy, startPolicyDouble, toolResults, assistantTurns, type Strategy } from './doubles/policy-double.js';
import { filesystemTarget, memoryTarget, SEEDED_MEMORY } from './helpers/servers.js';

const doubles: OpenAIDouble[] = [];
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
});

async function policyFor(strategy: Strategy): Promise<OpenAIPolicy> {
  const double = await startPolicyDouble(strategy);
  doubles.push(double);
  return new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
}

const scenario: Scenario = { id: 'remember', task: 'Remember Grace Hopper and a new fact about Ada Lovelace.', difficulty: 2, source: 'llm' };
const toolMessages = (t: McpTrajectory) => t.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');

describe('server-memory with MEMORY_FILE_PATH={sandbox}/memory.jsonl', () => {
  const writeThenRead = scriptedStrategy([
    { toolCalls: [{ name: 'create_entities', arguments: { entities: [{ name: 'Grace Hopper', entityType: 'person', observations: ['wrote the first compiler'] }] } }] },
    { toolCalls: [{ name: 'add_observations', arguments: { observations: [{ entityName: 'Ada Lovelace', contents: ['met Babbage in 1833'] }] } }] },
    { toolCalls: [{ name: 'read_graph', arguments: {} }] },
  ]);

  function userMemory(): { dir: string; file: string; bytes: Buffer } {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-user-memory-'));
    const file = path.join(dir, 'memory.jsonl');
    writeFileSync(file, SEEDED_MEMORY);
    return { dir, file, bytes: readFileSync(file) };
  }

  it('--isolate: each rollout writes to its own copy of --sandbox-from; the user file stays byte-identical', async () => {
    const user = userMemory();
    const groups = await rolloutGroups({
      policy: await policyFor(writeThenRead), target: memoryTarget('{sandbox}/memory.jsonl'), scenarios: [scenario],
      rolloutsPerGroup: 2, concurrency: 1, isolate: true, sandboxFrom: user.dir,
    });
    for (const t of groups[0]) {
      expect(t.error).toBeUndefined();
      const [created, added, graph] = toolMessages(t);
      expect(created).toContain('Grace Hopper');
      expect(added).toContain('met Babbage in 1833');
      // The copy held the user's entities, and each rollout started from it afresh (the fact is there once).
      expect(graph).toContain('Charles Babbage');
      expect(graph).toContain('Grace Hopper');
      expect(graph.split('met Babbage in 1833').length - 1).toBe(1);
      expect(t.metrics.tool_errors).toBe(0);
    }
    expect(readFileSync(user.file).equals(user.bytes)).toBe(true);
  });

  it('without --isolate the write tools are refused: the model reads why, the logs say how to enable them', async () => {
    const user = userMemory();
    const groups = await rolloutGroups({
      policy: await policyFor(writeThenRead), target: memoryTarget(user.file), scenarios: [scenario], rolloutsPerGroup: 1, concurrency: 1,
    });
    const [created, added, graph] = toolMessages(groups[0][0]);
    expect(created).toBe(`Error: ${unisolatedWriteRefusal('create_entities').reason}`);
    expect(added).toBe(`Error: ${unisolatedWriteRefusal('add_observations').reason}`);
    // The model cannot rerun a command line; the operator reads the options in the trajectory's logs.
    expect(created).not.toMatch(/--isolate|rerun/i);
    expect(groups[0][0].logs.some((l) => l.includes(`the safety policy refused create_entities: The target keeps its state in MEMORY_FILE_PATH=${user.file}; run with --isolate and MEMORY_FILE_PATH={sandbox}/memory.jsonl`))).toBe(true);
    expect(graph).toContain('Charles Babbage');
    expect(graph).not.toContain('Grace Hopper');
    expect(groups[0][0].metrics.tool_errors).toBe(2);
    expect(readFileSync(user.file).equals(user.bytes)).toBe(true);
  });

  it('--allow-unisolated-writes is the explicit opt-out: then the real file does change', async () => {
    const user = userMemory();
    await rolloutGroups({
      policy: await policyFor(writeThenRead), target: memoryTarget(user.file), scenarios: [scenario], rolloutsPerGroup: 1, concurrency: 1,
      policyForSafety: new SafetyPolicy({ allowUnisolatedWrites: true }),
    });
    expect(readFileSync(user.file, 'utf8')).toContain('Grace Hopper');
  });
});

describe('server-filesystem serving {sandbox}', () => {
  // The sandbox's path is only known at run time: the policy asks the server for its root, then writes there.
  const rootOf = (body: unknown) => toolResults(body)[0].split('\n').find((l) => l.includes('mcprl-sandbox-'))!.trim();
  const writeInRoot: Strategy = (body) => {
    const step = assistantTurns(body);
    if (step === 0) return { toolCalls: [{ name: 'list_allowed_directories', arguments: {} }] };
    const file = path.join(rootOf(body), 'notes.txt');
    if (step === 1) return { toolCalls: [{ name: 'write_file', arguments: { path: file, content: 'changed by the agent' } }] };
    if (step === 2) return { toolCalls: [{ name: 'read_text_file', arguments: { path: file } }] };
    return { toolCalls: [{ name: 'complete_task', arguments: { summary: `sandbox ${rootOf(body)}` } }] };
  };
  const task: Scenario = { id: 'notes', task: 'Rewrite notes.txt.', difficulty: 1, source: 'llm' };

  function userFolder(): { dir: string; bytes: Buffer } {
    const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-user-files-'));
    writeFileSync(path.join(dir, 'notes.txt'), 'the original notes\n');
    return { dir, bytes: readFileSync(path.join(dir, 'notes.txt')) };
  }

  it('--isolate: write_file changes a copy; the --sandbox-from folder is byte-identical and the sandbox is removed', async () => {
    const user = userFolder();
    const groups = await rolloutGroups({
      policy: await policyFor(writeInRoot), target: filesystemTarget('{sandbox}'), scenarios: [task], rolloutsPerGroup: 1, concurrency: 1,
      isolate: true, sandboxFrom: user.dir, policyForSafety: new SafetyPolicy({ allow: ['write_file'] }),
    });
    const t = groups[0][0];
    const [, written, read] = toolMessages(t);
    expect(written).not.toMatch(/^Error/);
    expect(read).toMatch(/^changed by the agent\n/);
    const sandbox = t.final_answer!.replace(/^sandbox /, '');
    expect(sandbox).not.toBe(user.dir);
    expect(existsSync(sandbox)).toBe(false);
    expect(readFileSync(path.join(user.dir, 'notes.txt')).equals(user.bytes)).toBe(true);
  });

  it('without --isolate write_file is refused even when --allow names it', async () => {
    const user = userFolder();
    const groups = await rolloutGroups({
      policy: await policyFor(writeInRoot), target: filesystemTarget('{sandbox}'), scenarios: [task], rolloutsPerGroup: 1, concurrency: 1,
      sandboxFrom: user.dir, policyForSafety: new SafetyPolicy({ allow: ['write_file'] }),
    });
    const [, written, read] = toolMessages(groups[0][0]);
    expect(written).toBe(`Error: ${unisolatedWriteRefusal('write_file').reason}`);
    expect(read).toMatch(/^the original notes\n/);
    expect(readFileSync(path.join(user.dir, 'notes.txt')).equals(user.bytes)).toBe(true);
  });
});
