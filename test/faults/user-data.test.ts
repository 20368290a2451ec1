/**
 * Issue 42, section 1: the user's data is never written unless every rollout's state is a sandbox (`{sandbox}` in
 * the target) or the user said the target keeps its state in memory only.
 *
 * Against the real published server-memory (its MEMORY_FILE_PATH the user's own file) and server-filesystem (the
 * user's own folder), from node_modules: `mcprl scenarios --offline`, `mcprl eval` (a scripted policy behind an
 * OpenAI-compatible double that calls the write tools on the user's paths; it stands in for a remote model) and
 * `mcprl train --offline` for 2 steps on the bundled tiny model, each with and without --isolate and with and
 * without --sandbox-from, all with --allow-destructive. The sha256 of the user's data is the same afterwards, and
 * what the user reads says which tools were refused and the exact change that makes them run.
 */
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeScenarioSet, type Scenario } from '../../src/scenarios/scenario.js';
import type { OpenAIDouble } from '../doubles/openai-double.js';
import { scriptedStrategy, startPolicyDouble } from '../doubles/policy-double.js';
import { FILESYSTEM_MAIN, MEMORY_MAIN, SEEDED_MEMORY, USER_FILES } from '../helpers/servers.js';
import { TINY_MODEL } from '../mcp-server-helpers.js';
import { mcprl, sha256Of, type CliResult } from './cli.js';
import { fault } from './fault-table.js';

const base = realpathSync(mkdtempSync(path.join(tmpdir(), 'mcprl-user-data-')));
const doubles: OpenAIDouble[] = [];
afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
  rmSync(base, { recursive: true, force: true });
});

const task: Scenario = { id: 'change', task: 'Update what you know.', difficulty: 1, source: 'schema' };

interface Setup {
  name: string;
  /** The user's data: a file or a folder. */
  data: string;
  /** A folder to pass as --sandbox-from (the user's own data, as a user would). */
  seed: string;
  /** The target on the user's data, as CLI words (after the options). */
  target: string[];
  /** The same server with its state in a {sandbox}, as CLI words. */
  sandboxed: string[];
  /** Scripted turns that write to the user's data. */
  writes: Parameters<typeof scriptedStrategy>[0];
  /** What the refusal must say to change, exactly. */
  change: RegExp;
}

function memorySetup(): Setup {
  const dir = path.join(base, 'memory-user');
  const file = path.join(dir, 'memory.jsonl');
  rmSync(dir, { recursive: true, force: true });
  mkdirp(dir);
  writeFileSync(file, SEEDED_MEMORY);
  const config = (name: string, memoryFile: string) => {
    const f = path.join(base, `${name}.json`);
    writeFileSync(f, JSON.stringify({ mcpServers: { memory: { command: process.execPath, args: [MEMORY_MAIN], env: { MEMORY_FILE_PATH: memoryFile } } } }));
    return ['--config', f];
  };
  return {
    name: 'server-memory', data: file, seed: dir, target: config('memory-user', file), sandboxed: config('memory-sandbox', '{sandbox}/memory.jsonl'),
    writes: [
      { toolCalls: [{ name: 'create_entities', arguments: { entities: [{ name: 'Grace Hopper', entityType: 'person', observations: ['wrote a compiler'] }] } }] },
      { toolCalls: [{ name: 'add_observations', arguments: { observations: [{ entityName: 'Ada Lovelace', contents: ['junk'] }] } }] },
      { toolCalls: [{ name: 'delete_entities', arguments: { entityNames: ['Charles Babbage'] } }] },
    ],
    change: new RegExp(`MEMORY_FILE_PATH=${esc(file)}; run with --isolate and MEMORY_FILE_PATH=\\{sandbox\\}/memory\\.jsonl`),
  };
}

function filesystemSetup(): Setup {
  const dir = path.join(base, 'files-user');
  rmSync(dir, { recursive: true, force: true });
  mkdirp(dir);
  for (const [name, text] of Object.entries(USER_FILES)) writeFileSync(path.join(dir, name), text);
  return {
    name: 'server-filesystem', data: dir, seed: dir, target: ['--', process.execPath, FILESYSTEM_MAIN, dir], sandboxed: ['--', process.execPath, FILESYSTEM_MAIN, '{sandbox}'],
    writes: [
      { toolCalls: [{ name: 'write_file', arguments: { path: path.join(dir, 'notes.txt'), content: 'overwritten' } }] },
      { toolCalls: [{ name: 'edit_file', arguments: { path: path.join(dir, 'config.json'), edits: [{ oldText: 'demo', newText: 'junk' }] } }] },
      { toolCalls: [{ name: 'move_file', arguments: { source: path.join(dir, 'todo.md'), destination: path.join(dir, 'moved.md') } }] },
    ],
    change: new RegExp(`state in ${esc(dir)}; run with --isolate and \\{sandbox\\} in place of ${esc(dir)} \\(seed it with --sandbox-from ${esc(dir)}\\)`),
  };
}

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function mkdirp(dir: string) {
  mkdirSync(dir, { recursive: true });
}

const VARIANTS: { label: string; flags: (s: Setup) => string[] }[] = [
  { label: 'shared', flags: () => [] },
  { label: '--isolate', flags: () => ['--isolate'] },
  { label: '--sandbox-from', flags: (s) => ['--sandbox-from', s.seed] },
  { label: '--isolate --sandbox-from', flags: (s) => ['--isolate', '--sandbox-from', s.seed] },
];

describe.each([
  { server: 'server-memory', make: memorySetup },
  { server: 'server-filesystem', make: filesystemSetup },
])('$server: the user\'s data, byte-identical', ({ make }) => {
  let s: Setup;
  let policyUrl: string;
  let evalScenarios: string;
  beforeAll(async () => {
    s = make();
    const double = await startPolicyDouble(scriptedStrategy(s.writes));
    doubles.push(double);
    policyUrl = double.baseURL;
    evalScenarios = path.join(base, `${s.name}-eval-scenarios`);
    await writeScenarioSet(evalScenarios, [task], [{ ...task, id: 'change-val' }]);
  });

  const commands = (tag: string, target: string[], flags: string[]): { what: string; args: string[] }[] => [
    { what: 'scenarios --offline', args: ['scenarios', '--offline', '--count', '6', '--out', path.join(base, `${s.name}-${tag}-scen`), '--allow-destructive', ...flags, ...target] },
    {
      what: 'eval',
      args: ['eval', '--scenarios', evalScenarios, '--model-base-url', policyUrl, '--model', 'scripted', '--rollouts', '1', '--concurrency', '1', '--max-turns', '4',
        '--out', path.join(base, `${s.name}-${tag}-eval`), '--json', '--allow-destructive', ...flags, ...target],
    },
    {
      what: 'train --offline (2 steps)',
      args: ['train', '--offline', '--count', '4', '--model', TINY_MODEL, '--run', `${s.name}-${tag}`, '--runs-dir', path.join(base, 'runs'), '--max-steps', '2', '--eval-every', '2',
        '--groups-per-step', '1', '--rollouts-per-group', '2', '--max-turns', '1', '--max-tokens', '16', '--concurrency', '2', '--patience', '10', '--quiet', '--json',
        '--allow-destructive', ...flags, ...target],
    },
  ];

  it('scenarios, eval and train, with and without --isolate and --sandbox-from: the sha256 never changes, the refusal says how, and on a {sandbox} the writes run', async () => {
    const before = sha256Of(s.data);
    const observed: string[] = [];
    for (const v of VARIANTS) {
      const flags = v.flags(s);
      for (const c of commands(v.label.replace(/\W+/g, '-'), s.target, flags)) {
        const pre = sha256Of(s.data);
        const r: CliResult = await mcprl(c.args);
        const after = sha256Of(s.data);
        observed.push(`${c.what} ${v.label}: exit ${r.code}, ${after === pre ? 'data unchanged' : 'DATA CHANGED'}`);
        expect(after, `${c.what} ${v.label} changed the user's data\n${r.stderr}`).toBe(before);
        if (flags.includes('--sandbox-from')) {
          // Nothing to copy into: an error that says where {sandbox} goes, before anything runs.
          expect(r.code, r.stderr).toBe(1);
          expect(r.stderr).toMatch(/--sandbox-from \S+: the target names no \{sandbox\}, so there is nothing to copy it into/);
        } else {
          expect(r.code, r.stderr).toBe(0);
          // One line names the refused tools and the exact change to the target; the {sandbox} change comes first.
          const lines = r.stderr.split('\n').filter((l) => l.includes('write tools refused'));
          expect(lines, r.stderr).toHaveLength(1);
          expect(lines[0]).toMatch(s.change);
          expect(lines[0]).toMatch(/or declare --state-in-memory if the server keeps nothing on disk, or --allow-unisolated-writes/);
          expect(lines[0]).toMatch(s.name === 'server-memory' ? /\(create_entities, .*add_observations/ : /\(.*write_file.*move_file/);
        }
      }
    }
    // The same server with its state in a {sandbox}, under --isolate --sandbox-from: the writes run, on copies.
    const out = path.join(base, `${s.name}-sandboxed-eval`);
    const [scen, ev] = commands('sandboxed', s.sandboxed, ['--isolate', '--sandbox-from', s.seed]);
    for (const r of [await mcprl(scen.args), await mcprl(ev.args)]) {
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).not.toMatch(/write tools refused/);
    }
    const lines = readFileSync(path.join(out, 'trajectories.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const tool = lines[0].messages.filter((m: { role: string }) => m.role === 'tool').map((m: { content: string }) => m.content);
    // The policy let the write through (server-filesystem itself then keeps the agent inside its sandbox root).
    expect(tool[0]).not.toMatch(/safety policy refused/);
    if (s.name === 'server-memory') expect(tool[0]).toContain('Grace Hopper');
    expect(sha256Of(s.data)).toBe(before);
    observed.push(`on {sandbox} with --isolate --sandbox-from: scenarios and eval exit 0, the write ran on a copy, data unchanged`);
    fault(
      `${s.name} on the user's own data: scenarios --offline, eval (a policy that writes) and 2 train steps, with and without --isolate and --sandbox-from, --allow-destructive`,
      'sha256 of the user\'s data unchanged after every run; one line names the refused write tools and the {sandbox} change; --sandbox-from without {sandbox} is an error; on {sandbox} the writes run, on copies',
      observed.join('; '),
    );
  }, 900_000);
});
