// `mcprl scenarios` end to end as a child process, against the real fixture server (stdio). The LLM run uses
// the OpenAI test double (a stand-in for a remote LLM API, which cannot run here).
import { execFile } from 'node:child_process';
import { mkdtemp, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { loadScenarioSet } from '../src/scenarios/scenario.js';
import { ScenarioSummarySchema } from '../src/scenarios/scenario-set.js';
import { formatQuality, ScenarioQualitySchema } from '../src/ruler/quality.js';
import { chatReply, startOpenAIDouble, type OpenAIDouble } from './doubles/openai-double.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from './helpers/servers.js';

const run = promisify(execFile);
const ENTRY = path.join(REPO_ROOT, 'src', 'cli', 'entry.ts');
const SERVER = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];

async function mcprl(args: string[], env: Record<string, string> = {}) {
  return run(process.execPath, ['--import', 'tsx', ENTRY, ...args], { cwd: REPO_ROOT, env: { ...process.env, ...env } }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

let llm: OpenAIDouble | undefined;
afterEach(async () => {
  await llm?.close();
  llm = undefined;
});

describe('mcprl scenarios', () => {
  it('--offline writes a seeded, reproducible train/val split and prints a JSON summary', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-cli-scn-'));
    const a = await mcprl(['scenarios', '--offline', '--out', path.join(dir, 'a'), '--count', '15', '--seed', '4', '--json', ...SERVER]);
    expect(a.code, a.stderr).toBe(0);
    const summary = JSON.parse(a.stdout);
    expect(summary).toMatchObject({ total: 15, train: 10, val: 5, bySource: { llm: 0, schema: 15 } });
    expect(Object.values(summary.byDifficulty as Record<string, number>).reduce((x, y) => x + y, 0)).toBe(15);
    const coverage = ScenarioSummarySchema.parse(summary).coverage;
    expect(coverage.filter((t) => t.reason === 'writes_state').map((t) => t.tool).sort()).toEqual(['place_order', 'restock']);
    // cancel_order is destructive: the default policy refuses it even in isolation.
    expect(coverage.find((t) => t.tool === 'cancel_order')).toMatchObject({ scenarios: 0, reason: 'refused_by_policy' });
    expect(coverage.filter((t) => t.scenarios > 0).length).toBeGreaterThan(3);
    // The quality table: no task names a tool; every read-only task is passed by the oracle and failed by doing
    // nothing, and none by one random call.
    const quality = ScenarioQualitySchema.parse(summary.quality);
    expect(quality).toMatchObject({ scenarios: 15, namingTool: 0, randomPass: 0 });
    expect(quality.measured).toBeGreaterThan(0);
    expect(quality.oraclePassIdleFail).toBe(quality.measured);
    expect(quality.chains).toBeGreaterThan(0);
    const set = await loadScenarioSet(path.join(dir, 'a'));
    expect(set.train).toHaveLength(10);
    expect(set.val).toHaveLength(5);
    const b = await mcprl(['scenarios', '--offline', '--out', path.join(dir, 'b'), '--count', '15', '--seed', '4', ...SERVER]);
    expect(b.code, b.stderr).toBe(0);
    expect(b.stdout).toMatch(/15 scenarios .*train\.jsonl \(10\).*val\.jsonl \(5\)/);
    expect(b.stdout).toMatch(/dropped +\d+ duplicates, \d+ unverifiable/);
    expect(b.stdout).toContain(formatQuality(quality).join('\n'));
    // The coverage lines are rendered from the same data --json printed.
    for (const t of coverage) {
      expect(b.stdout).toMatch(new RegExp(`^  ${t.tool} +${t.scenarios > 0 ? `${t.scenarios} scenarios?` : 'none: '}`, 'm'));
    }
    for (const f of ['train.jsonl', 'val.jsonl']) {
      expect(await readFile(path.join(dir, 'b', f), 'utf8')).toBe(await readFile(path.join(dir, 'a', f), 'utf8'));
    }
  });

  it('--test-fraction holds out a test set apart from train and val; without it the split is as before', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-cli-scn-'));
    const r = await mcprl(['scenarios', '--offline', '--out', dir, '--count', '16', '--seed', '4', '--val-fraction', '1/4', '--test-fraction', '1/4', '--json', ...SERVER]);
    expect(r.code, r.stderr).toBe(0);
    const summary = ScenarioSummarySchema.parse(JSON.parse(r.stdout));
    const set = await loadScenarioSet(dir);
    expect([set.train.length, set.val.length, set.test.length]).toEqual([summary.train, summary.val, summary.test]);
    expect(summary.train + summary.val + summary.test).toBe(summary.total);
    // A quarter each of the whole set (overlapping tasks go whole to one side, so within a group of one).
    expect(set.test.length).toBeGreaterThanOrEqual(3);
    expect(set.val.length).toBeGreaterThanOrEqual(3);
    const ids = [...set.train, ...set.val, ...set.test].map((x) => x.id);
    expect(new Set(ids).size).toBe(ids.length);

    const none = await mcprl(['scenarios', '--offline', '--out', path.join(dir, 'none'), '--count', '16', '--seed', '4', '--val-fraction', '1/4', ...SERVER]);
    expect(none.code, none.stderr).toBe(0);
    expect(none.stdout).not.toContain('test.jsonl');
    expect((await loadScenarioSet(path.join(dir, 'none'))).test).toEqual([]);

    const bad = await mcprl(['scenarios', '--offline', '--out', path.join(dir, 'bad'), '--val-fraction', '1/2', '--test-fraction', '1/2', ...SERVER]);
    expect(bad.code).toBe(1);
    expect(bad.stderr.trim()).toBe('mcprl scenarios: SCENARIO_GENERATION: --val-fraction 0.5 and --test-fraction 0.5 leave nothing to train on: their sum must be below 1');
  });

  it('LLM mode talks to --generator-base-url with the key from --generator-api-key-env', async () => {
    // Each task comes with its solution, which is replayed against the server (a get_book of a listed id).
    const tasks = Array.from({ length: 6 }, (_, i) => ({
      task: `Find a book ${['about', 'for', 'with', 'on', 'like', 'near'][i]} topic number ${i + 1} please`,
      difficulty: (i % 5) + 1,
      solution: { calls: [{ tool: 'get_book', arguments: JSON.stringify({ book_id: `bk-00${i + 1}` }) }], answer_contains: [] },
    }));
    llm = await startOpenAIDouble([chatReply(JSON.stringify({ scenarios: tasks }))]);
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-cli-scn-'));
    const r = await mcprl(
      ['scenarios', '--out', dir, '--count', '6', '--json', '--generator-base-url', llm.baseURL, '--generator-model', 'gen', '--generator-api-key-env', 'MY_GEN_KEY', '--instructions', 'Only about books.', ...SERVER],
      { MY_GEN_KEY: 'secret-123' },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ total: 6, train: 4, val: 2, bySource: { llm: 6, schema: 0 }, droppedInfeasible: {} });
    expect(llm.requests[0].headers.authorization).toBe('Bearer secret-123');
    expect(llm.requests[0].body.messages[1].content).toContain('Only about books.');
    expect(llm.requests[0].body.messages[1].content).toContain('search_books');
  });

  it('fails with one clear line when no generator model is given', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mcprl-cli-scn-'));
    const r = await mcprl(['scenarios', '--out', dir, ...SERVER]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim()).toMatch(/^mcprl scenarios: SCENARIO_GENERATION: --generator-model is required unless --offline/);
  });
});
