import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Workspace } from './workspace.js';

const base = mkdtempSync(path.join(tmpdir(), 'mcprl-ws-unit-'));
const root = path.join(base, 'ws');
const outside = path.join(base, 'outside');
const models = path.join(base, 'models');
mkdirSync(path.join(root, 'inner'), { recursive: true });
mkdirSync(path.join(outside, 'deep'), { recursive: true });
mkdirSync(path.join(models, 'm1'), { recursive: true });
writeFileSync(path.join(outside, 'secret.txt'), 'x');
symlinkSync(outside, path.join(root, 'escape'));
symlinkSync(path.join(root, 'inner'), path.join(root, 'alias'));
const ws = new Workspace(root, [models]);

afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('Workspace', () => {
  it('resolves relative paths and absolute paths inside it', () => {
    expect(ws.resolve('inner/file.json')).toBe(path.join(ws.root, 'inner', 'file.json'));
    expect(ws.resolve(path.join(ws.root, 'inner'))).toBe(path.join(ws.root, 'inner'));
    expect(ws.resolve('inner/../inner/x')).toBe(path.join(ws.root, 'inner', 'x'));
    // A link that stays inside is fine.
    expect(ws.resolve('alias/x')).toBe(path.join(ws.root, 'alias', 'x'));
  });

  it('refuses .., absolute paths elsewhere, and symbolic links that lead out (also for paths not created yet)', () => {
    expect(() => ws.resolve('../outside/secret.txt')).toThrow(/outside the workspace/);
    expect(() => ws.resolve('inner/../../outside')).toThrow(/outside the workspace/);
    expect(() => ws.resolve('/etc/passwd')).toThrow(expect.objectContaining({ code: 'WORKSPACE' }));
    expect(() => ws.resolve('escape/secret.txt')).toThrow(/symbolic link/);
    expect(() => ws.resolve('escape/deep/not-yet/created.json')).toThrow(/symbolic link/);
    expect(() => ws.resolve('')).toThrow(/empty/);
    expect(() => ws.resolve('a\0b')).toThrow(/NUL/);
  });

  it('reads models from the workspace or a models root, and shows paths relative to their root', () => {
    const m = ws.resolveModel('m1');
    expect(m).toBe(path.join(ws.modelRoots[1], 'm1'));
    expect(ws.display(m)).toBe('m1');
    expect(() => ws.resolveModel('../outside')).toThrow(expect.objectContaining({ code: 'WORKSPACE' }));
    expect(ws.display(path.join(ws.root, 'inner', 'a.json'))).toBe('inner/a.json');
  });

  it('checks run names: no separators, no dots first, no reserved folder names', () => {
    expect(Workspace.checkRunName('demo-1.v2_x')).toBe('demo-1.v2_x');
    for (const bad of ['../x', 'a/b', '.hidden', '..', '', 'scenarios', 'exports', 'evals', 'a b']) {
      expect(() => Workspace.checkRunName(bad), bad).toThrow(expect.objectContaining({ code: 'WORKSPACE' }));
    }
  });
});
