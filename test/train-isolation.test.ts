/**
 * `mcprl train --isolate --sandbox-from DIR` against the real server-memory (stdio, from node_modules) for two
 * steps with the bundled tiny model: the user's memory file comes out byte-identical, and every rollout ran its
 * scenario's state check on a server of its own.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeScenarioSet, type Scenario } from '../src/scenarios/scenario.js';
import { MEMORY_MAIN, REPO_ROOT, SEEDED_MEMORY } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const ENTRY = join(REPO_ROOT, 'src', 'cli', 'entry.ts');

const remember = (id: string, name: string, fact: string): Scenario => ({
  id,
  task: `Please create entities: an entity with name "${name}", entity type "person" and observations "${fact}".`,
  difficulty: 2,
  source: 'schema',
  checks: [
    { kind: 'tool_called', tool: 'create_entities', args: { entities: [{ name, entityType: 'person', observations: [fact] }] } },
    { kind: 'state_contains', tool: 'open_nodes', args: { names: [name] }, value: fact },
  ],
});

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-train-isolate-'));
  await writeFile(join(work, 'memory.jsonl'), SEEDED_MEMORY);
  await writeFile(
    join(work, 'mcp.json'),
    JSON.stringify({ mcpServers: { memory: { command: process.execPath, args: [MEMORY_MAIN], env: { MEMORY_FILE_PATH: '{sandbox}/memory.jsonl' } } } }),
  );
  await writeScenarioSet(
    join(work, 'scenarios'),
    [remember('w1', 'Grace Hopper', 'wrote the first compiler'), remember('w2', 'Alan Turing', 'broke the Enigma code')],
    [remember('w3', 'Hedy Lamarr', 'invented frequency hopping')],
  );
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

function train(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const args = [
    '--import', 'tsx', ENTRY, 'train', '--model', MODEL, '--scenarios', join(work, 'scenarios'), '--run', 'iso', '--runs-dir', join(work, 'runs'),
    '--max-steps', '2', '--eval-every', '1', '--groups-per-step', '2', '--rollouts-per-group', '2', '--max-turns', '2', '--max-tokens', '32',
    '--concurrency', '4', '--patience', '10', '--quiet', '--json',
    '--isolate', '--sandbox-from', work, '--config', join(work, 'mcp.json'),
  ];
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
}

describe('mcprl train --isolate on server-memory', () => {
  it('trains two steps; the memory file is byte-identical and every rollout checked the state on its own server', async () => {
    const before = await readFile(join(work, 'memory.jsonl'));
    const r = await train();
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ run: join(work, 'runs', 'iso') });
    expect((await readFile(join(work, 'memory.jsonl'))).equals(before)).toBe(true);
    const lines = (await readFile(join(work, 'runs', 'iso', 'trajectories', 'step-0001.jsonl'), 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.length).toBe(4);
    for (const t of lines) {
      expect(t.state).toHaveLength(1);
      expect(t.state[0]).toMatchObject({ tool: 'open_nodes', is_error: false });
    }
  }, 600_000);
});
