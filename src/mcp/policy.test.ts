import { describe, expect, it } from 'vitest';
import { SafetyPolicy, unisolatedWriteRefusal } from './policy.js';
import { toToolInfo } from './catalog.js';

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
    expect(remedy(cli, additive)).toMatch(/^Rerun with --isolate/);
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
