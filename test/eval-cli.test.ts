/**
 * `mcprl eval` end to end: the real CLI as a child process, the real bookshop fixture server over stdio, and
 * scripted HTTP doubles standing in for the remote policy model and the remote judge (neither can run here).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTHORS, BOOKS, RATES } from '../fixtures/server/bookshop.js';
import { McpTrajectorySchema, type McpTrajectory } from '../src/agent/trajectory.js';
import { writeScenarioSet, type Scenario } from '../src/scenarios/scenario.js';
import { chatReply, httpError, startOpenAIDouble, type OpenAIDouble } from './doubles/openai-double.js';
import { badStrategy, goodStrategy, startPolicyDouble } from './doubles/policy-double.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from './helpers/servers.js';

const run = promisify(execFile);
const ENTRY = path.join(REPO_ROOT, 'src', 'cli', 'entry.ts');

const b = (id: string) => BOOKS.find((x) => x.id === id)!;
const eur = (usd: number) => Math.round(usd * RATES.EUR * 100) / 100;
const japan = AUTHORS.find((a) => a.country === 'Japan')!;

// Hand-written verifiable scenarios; ground truth comes from the fixture's own catalogue.
const train: Scenario[] = [
  {
    id: 'price-eur',
    task: `How much does the book with id bk-003 cost in euros?`,
    difficulty: 2,
    source: 'schema',
    checks: [
      { kind: 'tool_called', tool: 'get_book', args: { book_id: 'bk-003' } },
      { kind: 'tool_called', tool: 'convert_price', args: { amount: b('bk-003').price_usd, currency: 'EUR' } },
      { kind: 'answer_contains', value: String(eur(b('bk-003').price_usd)) },
    ],
  },
  {
    id: 'stock',
    task: 'Is bk-007 in stock, and what is its title?',
    difficulty: 1,
    source: 'schema',
    checks: [
      { kind: 'tool_called', tool: 'check_stock', args: { book_id: 'bk-007' } },
      { kind: 'answer_contains', value: b('bk-007').title },
    ],
  },
  {
    id: 'japan',
    task: 'Which of our authors come from Japan?',
    difficulty: 1,
    source: 'schema',
    checks: [
      { kind: 'tool_called', tool: 'list_authors', args: { country: 'Japan' } },
      { kind: 'answer_contains', value: japan.name },
    ],
  },
];
const val: Scenario[] = [
  {
    id: 'order',
    task: 'Order one copy of bk-002 for Ada Lovelace (ada@example.com) and tell me the order id.',
    difficulty: 3,
    source: 'schema',
    checks: [
      { kind: 'tool_called', tool: 'place_order', args: { customer: { name: 'Ada Lovelace', email: 'ada@example.com' }, items: [{ book_id: 'bk-002', quantity: 1 }] } },
      // Every rollout starts from a fresh server under --isolate, so every order is the shop's first.
      { kind: 'answer_contains', value: 'ord-0001' },
    ],
  },
  {
    id: 'author-books',
    task: `Which books has ${japan.name} written? Give their ids.`,
    difficulty: 2,
    source: 'schema',
    checks: [
      { kind: 'tool_called', tool: 'get_author', args: { author_id: japan.id } },
      ...BOOKS.filter((x) => x.author_id === japan.id).map((x) => ({ kind: 'answer_contains' as const, value: x.id })),
    ],
  },
];
const all = [...train, ...val];

let dir: string;
const doubles: OpenAIDouble[] = [];

async function evalCli(args: string[]): Promise<{ stdout: string; stderr: string; code: number }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', ENTRY, 'eval', ...args, '--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN], {
      cwd: REPO_ROOT,
      env: { ...process.env, OPENAI_API_KEY: 'test-key' },
      timeout: 280_000, // a safety net under the test timeout, not a speed check
    });
    return { stdout, stderr, code: 0 };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; code?: number };
    return { stdout: e.stdout ?? '', stderr: e.stderr ?? '', code: typeof e.code === 'number' ? e.code : -1 };
  }
}

async function readTrajectories(out: string): Promise<McpTrajectory[]> {
  const text = await readFile(path.join(out, 'trajectories.jsonl'), 'utf8');
  return text.trim().split('\n').map((l) => McpTrajectorySchema.parse(JSON.parse(l)));
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'mcprl-eval-'));
  await writeScenarioSet(path.join(dir, 'scenarios'), train, val);
});

afterAll(async () => {
  await Promise.all(doubles.map((d) => d.close()));
  await rm(dir, { recursive: true, force: true });
});

describe('mcprl eval on the fixture server', () => {
  it('the scripted good policy scores 100 % success (with --isolate), and the files match the summary', async () => {
    const policy = await startPolicyDouble(goodStrategy(all));
    doubles.push(policy);
    const out = path.join(dir, 'good');
    const r = await evalCli(['--scenarios', path.join(dir, 'scenarios'), '--model-base-url', policy.baseURL, '--model', 'good', '--rollouts', '2', '--concurrency', '3', '--isolate', '--state-in-memory', '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({
      model: 'good',
      reward_mode: 'checks',
      scenarios: 5,
      rollouts_per_group: 2,
      trajectories: 10,
      success_rate: 1,
      mean_reward: 1,
      tool_call_validity_rate: 1,
      invalid_calls: 0,
      judge_failures: 0,
      rollout_errors: 0,
    });
    expect(summary.mean_turns).toBeGreaterThanOrEqual(2);
    const onDisk = JSON.parse(await readFile(path.join(out, 'summary.json'), 'utf8'));
    const { files: _files, ...printed } = summary;
    expect(onDisk).toEqual(printed);
    const trajectories = await readTrajectories(out);
    // Groups are appended as they finish (an interrupted eval keeps them), so the file's order is the finishing order.
    expect(trajectories.map((t) => t.id).sort()).toEqual(all.flatMap((s) => [`${s.id}/0`, `${s.id}/1`]).sort());
    for (const t of trajectories) {
      expect(t.reward_components).toEqual({ checks: 1 });
      expect(t.metrics.checks_passed).toBe(t.metrics.checks_total);
    }
    // The API key came from OPENAI_API_KEY.
    expect(policy.requests.find((q) => q.method === 'POST')!.headers.authorization).toBe('Bearer test-key');
  });

  it('the scripted bad policy scores under 20 % (text output)', async () => {
    const policy = await startPolicyDouble(badStrategy());
    doubles.push(policy);
    const out = path.join(dir, 'bad');
    const r = await evalCli(['--scenarios', path.join(dir, 'scenarios'), '--model-base-url', policy.baseURL, '--model', 'bad', '--rollouts', '2', '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/success rate\s+0\.0 %/);
    expect(r.stdout).toMatch(/tool-call validity\s+100\.0 %/);
    const summary = JSON.parse(await readFile(path.join(out, 'summary.json'), 'utf8'));
    expect(summary.success_rate).toBeLessThan(0.2);
    expect(summary.trajectories).toBe(10);
    expect(r.stderr).toMatch(/\[10\/10\]/);
  });

  it('--split and --limit choose scenarios; blend with a judge keeps both components; a failing judge is counted', async () => {
    const policy = await startPolicyDouble(goodStrategy(all));
    doubles.push(policy);
    // The judge double gives 0.6 to every trajectory, except that it fails (500) for the "japan" group.
    const judge = await startOpenAIDouble([], {
      fallback: (req) => {
        const user: string = req.body.messages[1].content;
        if (user.includes('come from Japan')) return httpError(500, 'judge down');
        const ids = [...user.matchAll(/<trajectory id="(\d+)">/g)].map((m) => m[1]);
        return chatReply(JSON.stringify({ scores: ids.map((id) => ({ trajectory_id: id, explanation: 'fine', score: 0.6 })) }));
      },
    });
    doubles.push(judge);
    const out = path.join(dir, 'blend');
    const r = await evalCli([
      '--scenarios', path.join(dir, 'scenarios'), '--split', 'train', '--limit', '3',
      '--model-base-url', policy.baseURL, '--model', 'good',
      '--judge-base-url', judge.baseURL, '--judge-model', 'judge', '--reward', 'blend', '--rollouts', '2',
      '--out', out, '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({ reward_mode: 'blend', scenarios: 3, trajectories: 6, judge_groups: 3, judge_failures: 1, success_rate: 1 });
    const trajectories = await readTrajectories(out);
    for (const t of trajectories) {
      if (t.scenario_id === 'japan') {
        expect(t.reward_components).toEqual({ checks: 1 });
        expect(t.logs.join('\n')).toMatch(/ruler: group skipped: .*HTTP 500/);
      } else {
        expect(t.reward_components).toEqual({ ruler: 0.6, checks: 1 });
        expect(t.reward).toBeCloseTo(0.8, 12);
      }
    }
    // Japan's judge request was retried (1 + 3 retries); the others answered at once.
    const japanRequests = judge.requests.filter((q) => q.method === 'POST' && q.body.messages[1].content.includes('come from Japan'));
    expect(japanRequests).toHaveLength(4);
  });

  it('fails with one clear line on bad options', async () => {
    const r = await evalCli(['--scenarios', path.join(dir, 'scenarios'), '--model-base-url', 'http://127.0.0.1:9/v1', '--model', 'm', '--reward', 'ruler']);
    expect(r.code).toBe(1);
    expect(r.stderr.trim()).toBe('mcprl eval: reward ruler needs a judge: add --judge-base-url and --judge-model');
  });

  it('without --model-base-url runs the model folder in-process, and says so when --model is not one', async () => {
    const out = path.join(dir, 'in-process');
    const tiny = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
    const r = await evalCli(['--scenarios', path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'), '--split', 'val', '--limit', '2', '--model', tiny, '--chat-template-kwargs', '{"enable_thinking": false}', '--max-turns', '2', '--max-tokens', '48', '--temperature', '0', '--out', out, '--json']);
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    // The weak tiny model's score is not the point; that its turns came from the engine is.
    expect(summary).toMatchObject({ model: 'tiny-bookshop', scenarios: 2, trajectories: 2, rollout_errors: 0 });
    const trajectories = await readTrajectories(out);
    const assistant = trajectories[0].messages.find((m) => m.role === 'assistant') as { mcprl?: { token_ids?: number[] } };
    expect(assistant.mcprl?.token_ids?.length).toBeGreaterThan(0);
    const bad = await evalCli(['--scenarios', path.join(dir, 'scenarios'), '--model', 'qwen3']);
    expect(bad.code).toBe(1);
    expect(bad.stderr.trim()).toMatch(/^mcprl eval: --model qwen3: not a Hugging Face model folder \(no config.json\); give --model-base-url/);
  });
});
