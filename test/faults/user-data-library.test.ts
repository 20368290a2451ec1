/**
 * Issue 42, section 1, through the library and `mcprl mcp`: the same rule as the commands. A fresh server process
 * per rollout on the user's own file is not isolation; `sandboxFrom` without `{sandbox}` is an error; the user's
 * in-memory declaration (`stateInMemory`, `target.state_in_memory`) is the one other way writes run. Against the
 * real published server-memory, its MEMORY_FILE_PATH the user's own file; the agent is a scripted policy behind an
 * OpenAI-compatible double (it stands in for a remote model).
 */
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { OpenAIPolicy } from '../../src/agent/policy.js';
import { rolloutGroups } from '../../src/agent/rollout-groups.js';
import { connect, SafetyPolicy, SandboxError } from '../../src/mcp/index.js';
import type { Scenario } from '../../src/scenarios/scenario.js';
import type { OpenAIDouble } from '../doubles/openai-double.js';
import { scriptedStrategy, startPolicyDouble } from '../doubles/policy-double.js';
import { fixtureStdioTarget, MEMORY_MAIN, memoryTarget, SEEDED_MEMORY } from '../helpers/servers.js';
import { call, stdioClient } from '../mcp-server-helpers.js';
import { fault } from './fault-table.js';
import { sha256Of } from './cli.js';

const base = realpathSync(mkdtempSync(path.join(tmpdir(), 'mcprl-user-data-lib-')));
const doubles: OpenAIDouble[] = [];
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
  rmSync(base, { recursive: true, force: true });
});

function userMemory(name: string): { dir: string; file: string } {
  const dir = path.join(base, name);
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'memory.jsonl');
  writeFileSync(file, SEEDED_MEMORY);
  return { dir, file };
}

const remember = scriptedStrategy([
  { toolCalls: [{ name: 'create_entities', arguments: { entities: [{ name: 'Grace Hopper', entityType: 'person', observations: ['wrote a compiler'] }] } }] },
  { toolCalls: [{ name: 'add_observations', arguments: { observations: [{ entityName: 'Ada Lovelace', contents: ['junk'] }] } }] },
]);
const scenario: Scenario = { id: 'remember', task: 'Remember Grace Hopper.', difficulty: 1, source: 'llm' };

describe('the library: connect and rolloutGroups on the user\'s own file', () => {
  it('a fresh process per rollout (isolate) on the user\'s file refuses the writes; the file is byte-identical', async () => {
    const user = userMemory('rollouts');
    const before = sha256Of(user.file);
    const double = await startPolicyDouble(remember);
    doubles.push(double);
    const groups = await rolloutGroups({
      policy: new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 }), target: memoryTarget(user.file), scenarios: [scenario],
      rolloutsPerGroup: 2, concurrency: 1, isolate: true, policyForSafety: new SafetyPolicy({ allowDestructive: true }),
    });
    const session = await connect(memoryTarget(user.file), { isolated: true });
    let direct: Awaited<ReturnType<typeof session.callTool>>;
    try {
      direct = await session.callTool('create_entities', { entities: [{ name: 'Junk', entityType: 'thing', observations: [] }] });
    } finally {
      await session.close();
    }
    const after = sha256Of(user.file);
    const observed = `rolloutGroups isolate: ${after === before ? 'file unchanged' : 'FILE CHANGED'}, ${groups.flat().map((t) => t.metrics.tool_errors).join('/')} refused calls; connect isolated: create_entities ${direct.isError ? 'refused' : 'ran'}`;
    expect(after, readFileSync(user.file, 'utf8')).toBe(before);
    expect(direct.refused?.remedy).toMatch(new RegExp(`^The target keeps its state in MEMORY_FILE_PATH=${user.file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}; run with --isolate and MEMORY_FILE_PATH=\\{sandbox\\}/memory\\.jsonl`));
    for (const t of groups.flat()) {
      expect(t.metrics.tool_errors).toBe(2);
      expect(t.logs.some((l) => l.includes('the safety policy refused create_entities: The target keeps its state in MEMORY_FILE_PATH='))).toBe(true);
    }
    fault(
      'library: rolloutGroups({isolate: true}) and connect({isolated: true}) on server-memory whose MEMORY_FILE_PATH is the user\'s file; the agent calls create_entities and add_observations',
      'writes refused (a fresh process is not isolation without {sandbox}); the file is byte-identical; the remedy names MEMORY_FILE_PATH={sandbox}/…',
      observed,
    );
  }, 120_000);

  it('sandboxFrom without {sandbox} in the target is an error, before any server runs', async () => {
    const user = userMemory('sandbox-from');
    const before = sha256Of(user.file);
    const double = await startPolicyDouble(remember);
    doubles.push(double);
    const connected = await connect(memoryTarget(user.file), { sandboxFrom: user.dir, isolated: true }).then(
      async (s) => { await s.callTool('create_entities', { entities: [{ name: 'Junk', entityType: 'thing', observations: [] }] }); await s.close(); return 'connected'; },
      (err: unknown) => err,
    );
    const rolled = await rolloutGroups({
      policy: new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 }), target: memoryTarget(user.file), scenarios: [scenario],
      rolloutsPerGroup: 1, concurrency: 1, isolate: true, sandboxFrom: user.dir,
    }).then(() => 'ran', (err: unknown) => err);
    const after = sha256Of(user.file);
    const observed = `connect: ${connected instanceof Error ? connected.message.slice(0, 80) : connected}; rolloutGroups: ${rolled instanceof Error ? 'error' : rolled}; ${after === before ? 'file unchanged' : 'FILE CHANGED'}`;
    expect(after).toBe(before);
    for (const err of [connected, rolled]) {
      expect(err).toBeInstanceOf(SandboxError);
      expect((err as SandboxError).code).toBe('SANDBOX_FROM');
      expect((err as Error).message).toMatch(/the target names no \{sandbox\}, so there is nothing to copy it into.*MEMORY_FILE_PATH=\{sandbox\}\/memory\.json/);
    }
    fault(
      'library: sandboxFrom with a target that names no {sandbox} (server-memory on the user\'s file)',
      'SandboxError SANDBOX_FROM saying where {sandbox} goes; nothing runs; the file is byte-identical',
      observed,
    );
  }, 120_000);

  it('stateInMemory is the user\'s explicit word: with isolate, writes run on a server that keeps nothing on disk', async () => {
    const session = await connect(fixtureStdioTarget(), { isolated: true, stateInMemory: true });
    const shared = await connect(fixtureStdioTarget(), { stateInMemory: true });
    try {
      const r = await session.callTool('restock', { book_id: 'bk-001', quantity: 1 });
      expect(r.isError, r.text).toBe(false);
      // Declared in-memory but shared by the rollouts: still refused, and the remedy says --isolate.
      const s = await shared.callTool('restock', { book_id: 'bk-001', quantity: 1 });
      expect(s.refused?.remedy).toMatch(/^The rollouts share one server: run with --isolate/);
    } finally {
      await session.close();
      await shared.close();
    }
  }, 60_000);
});

describe('mcprl mcp: generate_scenarios and inspect_server on the user\'s own file', () => {
  it('target.isolate on the user\'s file makes no write task and writes nothing; sandbox_from without {sandbox} is an error', async () => {
    const ws = path.join(base, 'ws');
    const user = userMemory(path.join('ws', 'user'));
    const before = sha256Of(user.file);
    const { client } = await stdioClient(['--workspace', ws, '--allow-destructive']);
    try {
      const target = { command: process.execPath, args: [MEMORY_MAIN], env: { MEMORY_FILE_PATH: user.file }, isolate: true };
      const gen = await call(client, 'generate_scenarios', { target, offline: true, count: 6, name: 'mem' });
      const afterGen = sha256Of(user.file);
      const seeded = await call(client, 'generate_scenarios', { target: { ...target, sandbox_from: 'user' }, offline: true, count: 6, name: 'mem2' });
      const inspected = await call(client, 'inspect_server', { target });
      const after = sha256Of(user.file);
      const observed = `generate_scenarios isolate: ${afterGen === before ? 'file unchanged' : 'FILE CHANGED'}; with sandbox_from: ${seeded.isError ? 'error' : 'ran'}, ${after === before ? 'file unchanged' : 'FILE CHANGED'}`;
      expect(afterGen).toBe(before);
      expect(after).toBe(before);
      expect(gen.isError, gen.text).toBe(false);
      const createEntities = (gen.data.summary.coverage as { tool: string; scenarios: number; reason?: string }[]).find((c) => c.tool === 'create_entities');
      expect(createEntities).toMatchObject({ scenarios: 0, reason: 'writes_state' });
      expect(gen.data.refused_writes).toMatch(/^write tools refused \(create_entities, .*\): .*target\.isolate: true and target\.env\.MEMORY_FILE_PATH: "\{sandbox\}\/memory\.jsonl"/);
      expect(seeded.isError).toBe(true);
      expect(seeded.text).toMatch(/target\.sandbox_from \S+: the target names no \{sandbox\}/);
      const tools = new Map((inspected.data.tools as { name: string; allowed: boolean; remedy?: string }[]).map((t) => [t.name, t]));
      expect(tools.get('create_entities')).toMatchObject({ allowed: false });
      expect(tools.get('create_entities')!.remedy).toMatch(/target\.isolate: true and target\.env\.MEMORY_FILE_PATH: "\{sandbox\}\/memory\.jsonl".*target\.state_in_memory: true/);
      fault(
        'mcprl mcp: generate_scenarios (offline) and inspect_server with target.isolate on server-memory whose MEMORY_FILE_PATH is the user\'s file; then with target.sandbox_from',
        'no write task, the file byte-identical; inspect says target.env.MEMORY_FILE_PATH: "{sandbox}/…"; sandbox_from without {sandbox} is an error',
        observed,
      );
    } finally {
      await client.close();
    }
  }, 240_000);
});
