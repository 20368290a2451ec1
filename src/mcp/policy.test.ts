import { describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { callSetting, refusedWritesLine, SafetyPolicy, unisolatedWriteRefusal, writeRemedy } from './policy.js';
import { toToolInfo } from './catalog.js';
import type { Target } from './types.js';

const tool = (name: string, annotations?: Record<string, boolean>) =>
  toToolInfo({ name, inputSchema: { type: 'object' }, ...(annotations ? { annotations } : {}) });

describe('SafetyPolicy', () => {
  const readOnly = tool('read', { readOnlyHint: true });
  const additive = tool('add', { readOnlyHint: false, destructiveHint: false });
  const destructive = tool('drop', { destructiveHint: true });
  const silent = tool('mystery'); // no annotations: the spec's defaults say "may be destructive"

  const isolated = { isolated: true };

  it('in isolation by default runs read-only and non-destructive tools and refuses possibly destructive ones, saying how to allow them', () => {
    const p = new SafetyPolicy();
    expect(p.check(readOnly, isolated)).toEqual({ allowed: true });
    expect(p.check(additive, isolated)).toEqual({ allowed: true });
    for (const t of [destructive, silent]) {
      const d = p.check(t, isolated);
      expect(d.allowed).toBe(false);
      if (!d.allowed) {
        expect(d.reason).toContain(`'${t.name}'`);
        expect(d.remedy).toContain('--allow-destructive');
        expect(d.remedy).toContain(`--allow ${t.name}`);
        // The model cannot rerun anything: what it reads names no command-line option.
        expect(d.reason).not.toMatch(/--|rerun/i);
      }
    }
  });

  it('allowDestructive and the allow list let destructive tools run; deny wins over everything', () => {
    expect(new SafetyPolicy({ allowDestructive: true }).check(silent, isolated)).toEqual({ allowed: true });
    expect(new SafetyPolicy({ allow: ['drop'] }).check(destructive, isolated)).toEqual({ allowed: true });
    expect(new SafetyPolicy({ allow: ['drop'] }).check(silent, isolated).allowed).toBe(false);
    expect(new SafetyPolicy({ allow: ['dr*'] }).check(destructive, isolated)).toEqual({ allowed: true });
    const deny = new SafetyPolicy({ allowDestructive: true, allow: ['read'], deny: ['read', 'dr*'] });
    expect(deny.check(readOnly, isolated).allowed).toBe(false);
    const denied = deny.check(readOnly, isolated);
    if (!denied.allowed) {
      expect(denied.remedy).toContain('--deny');
      expect(denied.reason).not.toMatch(/--|rerun/i);
    }
    expect(deny.check(destructive, isolated).allowed).toBe(false);
    expect(deny.check(additive, isolated).allowed).toBe(true);
  });

  it('outside isolation refuses every tool that may write, whatever allows it, unless allowUnisolatedWrites', () => {
    const all = new SafetyPolicy({ allowDestructive: true, allow: ['*'] });
    expect(all.check(readOnly)).toEqual({ allowed: true });
    for (const t of [additive, destructive, silent]) {
      const d = all.check(t);
      expect(d).toEqual(unisolatedWriteRefusal(t.name));
      if (!d.allowed) {
        expect(d.remedy).toMatch(/--isolate.*\{sandbox\}.*--allow-unisolated-writes/);
        expect(d.reason).not.toMatch(/--|rerun/i);
      }
    }
    const optOut = new SafetyPolicy({ allowUnisolatedWrites: true });
    expect(optOut.check(additive)).toEqual({ allowed: true });
    expect(optOut.check(destructive).allowed).toBe(false);
    expect(new SafetyPolicy({ allowUnisolatedWrites: true, deny: ['add'] }).check(additive).allowed).toBe(false);
    expect(optOut.settings()).toEqual({ allowDestructive: false, allow: [], deny: [], allowUnisolatedWrites: true, remedyFor: 'cli' });
  });

  it("words remedies for whoever can act on them: a command's options, or mcprl mcp's tool arguments and operator", () => {
    const cli = new SafetyPolicy({ deny: ['wipe'] });
    const mcp = new SafetyPolicy({ deny: ['wipe'], remedyFor: 'mcp' });
    const remedy = (p: SafetyPolicy, t: typeof additive, where = {}) => {
      const d = p.check(t, where);
      return d.allowed ? '' : d.remedy;
    };
    expect(remedy(mcp, additive)).toMatch(/target\.isolate: true.*target\.sandbox_from.*start.*mcprl mcp with --allow-unisolated-writes/);
    expect(remedy(mcp, additive)).not.toMatch(/Rerun|--isolate|--sandbox-from/);
    expect(remedy(cli, additive)).toMatch(/^A fresh server per rollout still writes the real data unless its state lives in a \{sandbox\}; run with --isolate/);
    expect(remedy(mcp, destructive, isolated)).toMatch(/starting mcprl mcp with --allow drop/);
    expect(remedy(mcp, { ...readOnly, name: 'wipe' })).toMatch(/deny list of mcprl mcp/);
    // The model's text is the same either way: it can act on neither.
    expect(mcp.check(additive)).toMatchObject({ reason: (cli.check(additive) as { reason: string }).reason });
    expect(mcp.settings().remedyFor).toBe('mcp');
  });

  it('fills the spec defaults for missing annotations', () => {
    expect(silent.annotations).toEqual({ readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true });
  });
});

describe('isolation: each rollout has its own state, or nothing writes', () => {
  const add = tool('add', { readOnlyHint: false, destructiveHint: false });
  const home = mkdtempSync(path.join(tmpdir(), 'mcprl-policy-'));
  const memoryFile = path.join(home, 'memory.json');
  writeFileSync(memoryFile, '');
  const docs = path.join(home, 'docs');
  mkdirSync(docs);
  writeFileSync(path.join(home, 'main.ts'), '');
  const memory = (file: string): Target => ({ kind: 'stdio', command: 'node', args: ['server-memory.js'], env: { MEMORY_FILE_PATH: file } });
  const files = (root: string): Target => ({ kind: 'stdio', command: 'npx', args: ['@modelcontextprotocol/server-filesystem', root] });
  const p = new SafetyPolicy();

  it('a fresh process is isolation only on a {sandbox} or a target declared in-memory', () => {
    expect(p.check(add, callSetting(memory(memoryFile), { isolate: true })).allowed).toBe(false);
    expect(p.check(add, callSetting(memory('{sandbox}/memory.json'), { isolate: true })).allowed).toBe(true);
    expect(p.check(add, callSetting(memory('{sandbox}/memory.json'), {})).allowed).toBe(false);
    expect(p.check(add, callSetting(memory(memoryFile), { isolate: true, stateInMemory: true })).allowed).toBe(true);
    expect(p.check(add, callSetting(memory(memoryFile), { stateInMemory: true })).allowed).toBe(false);
    expect(p.check(add, callSetting({ kind: 'http', url: 'http://127.0.0.1:1/mcp' }, { isolate: true, stateInMemory: true })).allowed).toBe(false);
  });

  it('says the exact change: the env value or argument that holds the state, in a {sandbox}', () => {
    expect(writeRemedy('cli', memory(memoryFile), { isolate: true })).toBe(
      `the target keeps its state in MEMORY_FILE_PATH=${memoryFile}; run with --isolate and MEMORY_FILE_PATH={sandbox}/memory.json ` +
        '(seed it with --sandbox-from DIR, a folder holding a copy of memory.json), or declare --state-in-memory if the server keeps ' +
        'nothing on disk, or --allow-unisolated-writes to let them change the real data',
    );
    expect(writeRemedy('cli', files(docs))).toMatch(new RegExp(`^the target keeps its state in ${docs}; run with --isolate and \\{sandbox\\} in place of ${docs} \\(seed it with --sandbox-from ${docs}\\)`));
    expect(writeRemedy('mcp', memory(memoryFile))).toMatch(/target\.isolate: true and target\.env\.MEMORY_FILE_PATH: "\{sandbox\}\/memory\.json" \(seed it with target\.sandbox_from: DIR.*target\.state_in_memory: true.*ask the operator to start mcprl mcp with --allow-unisolated-writes/);
    expect(writeRemedy('mcp', files(docs))).toMatch(/target\.args\[1\]: "\{sandbox\}" in place of/);
    const dataDir: Target = { kind: 'stdio', command: 'my-server', args: [], env: { DATA_DIR: docs } };
    expect(writeRemedy('cli', dataDir)).toMatch(new RegExp(`run with --isolate and DATA_DIR=\\{sandbox\\} \\(seed it with --sandbox-from ${docs}\\)`));
    // node's script is code, not state.
    expect(writeRemedy('cli', { kind: 'stdio', command: 'node', args: ['--import', 'tsx', path.join(home, 'main.ts')] })).toMatch(/^a fresh server per rollout/);
    // Where the state is cannot be seen: the generic advice, {sandbox} first.
    expect(writeRemedy('cli', { kind: 'stdio', command: 'my-server', args: [] })).toMatch(/^a fresh server per rollout still writes the real data unless its state lives in a \{sandbox\}; run with --isolate and \{sandbox\} where/);
    expect(writeRemedy('cli', memory('{sandbox}/m.json'))).toMatch(/^the rollouts share one server: run with --isolate \(a fresh server per rollout, each on its own \{sandbox\}\)/);
    expect(writeRemedy('cli', memory(memoryFile), { stateInMemory: true })).toMatch(/^the rollouts share one server: run with --isolate \(a fresh server per rollout, the target is declared in-memory\)/);
    expect(writeRemedy('cli', { kind: 'http', url: 'http://127.0.0.1:1/mcp' })).toMatch(/HTTP server.*stdio command with \{sandbox\}/);
  });

  it('refused writes are one line: the tools, then the change', () => {
    const tools = [tool('read', { readOnlyHint: true }), add, tool('drop'), tool('gone')];
    const line = refusedWritesLine(tools, new SafetyPolicy({ deny: ['gone'] }), callSetting(memory(memoryFile), { isolate: true }));
    expect(line).toMatch(/^write tools refused \(add, drop; drop also needs --allow-destructive\): the target keeps its state in MEMORY_FILE_PATH=/);
    expect(refusedWritesLine(tools, new SafetyPolicy({ allowDestructive: true }), callSetting(memory(memoryFile)))).toMatch(/^write tools refused \(add, drop, gone\): /);
    expect(line).not.toContain('\n');
    expect(refusedWritesLine(tools, p, callSetting(memory('{sandbox}/m.json'), { isolate: true }))).toBeUndefined();
    expect(unisolatedWriteRefusal('add', 'cli', callSetting(memory(memoryFile))).remedy).toMatch(/^The target keeps its state in MEMORY_FILE_PATH=.*real data\.$/);
  });
});
