import { describe, expect, it } from 'vitest';
import { SafetyPolicy } from './policy.js';
import { toToolInfo } from './catalog.js';

const tool = (name: string, annotations?: Record<string, boolean>) =>
  toToolInfo({ name, inputSchema: { type: 'object' }, ...(annotations ? { annotations } : {}) });

describe('SafetyPolicy', () => {
  const readOnly = tool('read', { readOnlyHint: true });
  const additive = tool('add', { readOnlyHint: false, destructiveHint: false });
  const destructive = tool('drop', { destructiveHint: true });
  const silent = tool('mystery'); // no annotations: the spec's defaults say "may be destructive"

  it('by default runs read-only and non-destructive tools and refuses possibly destructive ones, saying how to allow them', () => {
    const p = new SafetyPolicy();
    expect(p.check(readOnly)).toEqual({ allowed: true });
    expect(p.check(additive)).toEqual({ allowed: true });
    for (const t of [destructive, silent]) {
      const d = p.check(t);
      expect(d.allowed).toBe(false);
      if (!d.allowed) {
        expect(d.reason).toContain(`'${t.name}'`);
        expect(d.reason).toContain('--allow-destructive');
        expect(d.reason).toContain(`--allow ${t.name}`);
      }
    }
  });

  it('allowDestructive and the allow list let destructive tools run; deny wins over everything', () => {
    expect(new SafetyPolicy({ allowDestructive: true }).check(silent)).toEqual({ allowed: true });
    expect(new SafetyPolicy({ allow: ['drop'] }).check(destructive)).toEqual({ allowed: true });
    expect(new SafetyPolicy({ allow: ['drop'] }).check(silent).allowed).toBe(false);
    expect(new SafetyPolicy({ allow: ['dr*'] }).check(destructive)).toEqual({ allowed: true });
    const deny = new SafetyPolicy({ allowDestructive: true, allow: ['read'], deny: ['read', 'dr*'] });
    expect(deny.check(readOnly).allowed).toBe(false);
    expect(deny.check(destructive).allowed).toBe(false);
    expect(deny.check(additive).allowed).toBe(true);
  });

  it('fills the spec defaults for missing annotations', () => {
    expect(silent.annotations).toEqual({ readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true });
  });
});
