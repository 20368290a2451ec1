import { mkdtempSync, readFileSync, rmSync, writeFileSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkHeldOut } from '../src/mcp-rl/job.js';
import { loadScenarioSet, parseScenarios } from '../src/scenarios/scenario.js';
import { REPO_ROOT as ROOT } from './helpers/servers.js';

// Each tiny model in fixtures/models comes with the scenario sets drawn apart from its warm-up; mcprl train checks
// that (checkHeldOut) before it trains, and refuses a warm-up manifest that repeats a scenario id.
describe.each([
  ['tiny-bookshop', 'bookshop'],
])('fixtures/models/%s with fixtures/scenarios/%s', (model, scenarios) => {
  const modelDir = path.join(ROOT, 'fixtures', 'models', model);
  const work = mkdtempSync(path.join(tmpdir(), 'mcprl-heldout-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('passes the held-out check, and a validation task taken from the warm-up fails it', async () => {
    const set = await loadScenarioSet(path.join(ROOT, 'fixtures', 'scenarios', scenarios));
    await checkHeldOut(set, modelDir);
    const file = path.join(modelDir, 'mcprl_warmup.jsonl');
    const warmup = parseScenarios(readFileSync(file, 'utf8'), file);
    expect(new Set(warmup.map((s) => s.id)).size).toBe(warmup.length);
    await expect(checkHeldOut({ ...set, val: [...set.val, warmup[0]] }, modelDir)).rejects.toThrow(/mcprl_warmup\.jsonl/);
  });

  it('refuses a warm-up manifest that repeats a scenario id, naming the line', async () => {
    const copy = path.join(work, model);
    cpSync(modelDir, copy, { recursive: true, filter: (src) => !src.endsWith('.safetensors') });
    const file = path.join(copy, 'mcprl_warmup.jsonl');
    const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
    writeFileSync(file, [...lines, lines[0]].join('\n') + '\n');
    const set = await loadScenarioSet(path.join(ROOT, 'fixtures', 'scenarios', scenarios));
    await expect(checkHeldOut(set, copy)).rejects.toThrow(new RegExp(`mcprl_warmup\\.jsonl:${lines.length + 1}: duplicate scenario id`));
  });
});
