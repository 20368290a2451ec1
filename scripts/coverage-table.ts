/**
 * Measures issue 13's coverage table and issue 45's quality table in one run and prints them as one markdown table (or
 * `--json`): for the bundled fixture server, server-everything, server-memory (empty, and seeded with a few entities),
 * server-filesystem (a temp folder with three text files and a 1×1 PNG) and the 7-tool library server of
 * test/helpers, each a real process from this checkout or node_modules:
 * - tools with ≥ 1 scenario / all tools, scenarios made of `--count` (40) asked, the difficulty histogram and the
 *   share with a state check — from generateOfflineScenarios's result (data, never printed text);
 * - the share of checks a scripted oracle (the checked calls, then a summary quoting the results) and a do-nothing
 *   agent (no call, an empty answer) pass, every rollout on an isolated server in a sandbox of its own.
 * - the quality table `mcprl scenarios` prints (measureQuality, ScenarioQualitySchema): tasks that name a tool, chains,
 *   and of the read-only tasks those an oracle passes and a do-nothing agent fails, and those one random call passes.
 * The agents are the scripted policies of test/doubles behind their OpenAI-compatible HTTP double.
 *
 *   npm run coverage-table [-- --count 40 --seed 1 --json] [--json-out FILE] [--scenarios-out DIR] [--servers fixture,server-memory]
 *
 * Each row is printed as soon as its server is measured (stdout: the markdown table grows row by row; stderr: the
 * progress and the row), and `--json-out FILE` is rewritten after every row, so a run that is stopped keeps the rows
 * it measured. `--servers` measures only the setups whose names start with one of the given words. `--scenarios-out DIR`
 * keeps each setup's scenarios (DIR/<setup>.jsonl), to read the tasks behind a row.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { writeFileAtomic } from '../src/util/atomic.js';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { OpenAIPolicy } from '../src/agent/policy.js';
import { rolloutGroups } from '../src/agent/rollout-groups.js';
import { connect, SafetyPolicy, targetUsesSandbox } from '../src/mcp/index.js';
import type { Target } from '../src/mcp/types.js';
import { scoreChecks } from '../src/ruler/checks.js';
import { measureQuality, type ScenarioQuality } from '../src/ruler/quality.js';
import { generateOfflineScenarios } from '../src/scenarios/offline/index.js';
import type { ToolCoverage } from '../src/scenarios/coverage.js';
import { isStateCheck, type Scenario } from '../src/scenarios/scenario.js';
import { goodStrategy, scriptedStrategy, startPolicyDouble, type Strategy } from '../test/doubles/policy-double.js';
import { everythingStdioTarget, filesystemTarget, fixtureStdioTarget, memoryTarget, REPO_ROOT, SEEDED_MEMORY, tsStdioTarget, USER_FILES_WITH_IMAGE } from '../test/helpers/servers.js';

const { values: flags } = parseArgs({
  options: { count: { type: 'string', default: '40' }, seed: { type: 'string', default: '1' }, json: { type: 'boolean', default: false }, 'json-out': { type: 'string' }, 'scenarios-out': { type: 'string' }, servers: { type: 'string' } },
});
const count = Number(flags.count);
const seed = Number(flags.seed);

interface Setup {
  server: string;
  target: Target;
  /** Copied into each server's sandbox ({sandbox} in the target). */
  files?: Record<string, string | Buffer>;
  allowDestructive?: boolean;
}

export interface CoverageRow {
  server: string;
  toolsCovered: number;
  tools: number;
  /** Tools without a scenario, with the report's reason and how many candidates stopped at each stage. */
  uncovered: Pick<ToolCoverage, 'tool' | 'reason' | 'reasons'>[];
  scenarios: number;
  asked: number;
  byDifficulty: [number, number, number, number, number];
  withStateCheck: number;
  /** Checks passed / checks, over every scenario. */
  oracle: { passed: number; total: number };
  idle: { passed: number; total: number };
  /** The quality table `mcprl scenarios` prints for this set, measured on the same server. */
  quality: ScenarioQuality;
  seconds: number;
}

const SETUPS: Setup[] = [
  { server: 'fixture', target: fixtureStdioTarget() },
  { server: 'server-everything', target: everythingStdioTarget() },
  { server: 'server-memory, empty', target: memoryTarget('{sandbox}/memory.jsonl'), files: {} },
  { server: 'server-memory, seeded (3 entities, 2 relations)', target: memoryTarget('{sandbox}/memory.jsonl'), files: { 'memory.jsonl': SEEDED_MEMORY } },
  { server: 'server-memory, seeded, --allow-destructive', target: memoryTarget('{sandbox}/memory.jsonl'), files: { 'memory.jsonl': SEEDED_MEMORY }, allowDestructive: true },
  { server: 'server-filesystem (3 files and a PNG)', target: filesystemTarget('{sandbox}'), files: USER_FILES_WITH_IMAGE },
  { server: 'server-filesystem (3 files and a PNG), --allow-destructive', target: filesystemTarget('{sandbox}'), files: USER_FILES_WITH_IMAGE, allowDestructive: true },
  { server: 'library (7 read-only tools)', target: tsStdioTarget(path.join(REPO_ROOT, 'test', 'helpers', 'library-server.ts')) },
];

/** The setups `--servers` names (all without it); a word that names none is refused with the names there are. */
function chosenSetups(): Setup[] {
  if (!flags.servers) return SETUPS;
  const wanted = flags.servers.split(',').map((w) => w.trim().toLowerCase()).filter(Boolean);
  for (const w of wanted) {
    if (!SETUPS.some((s) => s.server.toLowerCase().startsWith(w))) {
      process.stderr.write(`coverage-table: --servers: ${JSON.stringify(w)} names no setup (they are: ${SETUPS.map((s) => JSON.stringify(s.server)).join(', ')})\n`);
      process.exit(2);
    }
  }
  return SETUPS.filter((s) => wanted.some((w) => s.server.toLowerCase().startsWith(w)));
}

/** The servers here that name no {sandbox} (the fixture, server-everything) keep their state in memory: said so. */
const inMemory = (s: Setup) => !targetUsesSandbox(s.target);

async function agentScores(s: Setup, sandboxFrom: string | undefined, safety: SafetyPolicy, scenarios: Scenario[], strategy: Strategy) {
  const double = await startPolicyDouble(strategy);
  try {
    const policy = new OpenAIPolicy({ baseURL: double.baseURL, model: 'scripted', maxRetries: 0 });
    const groups = await rolloutGroups({ policy, target: s.target, scenarios, rolloutsPerGroup: 1, concurrency: 4, isolate: true, sandboxFrom, stateInMemory: inMemory(s), policyForSafety: safety });
    let passed = 0;
    let total = 0;
    scenarios.forEach((sc, i) => {
      const r = scoreChecks(groups[i][0], sc);
      passed += r.passed;
      total += r.total;
    });
    return { passed, total };
  } finally {
    await double.close();
  }
}

async function measure(s: Setup): Promise<CoverageRow> {
  const t0 = Date.now();
  const sandboxFrom = s.files ? mkdtempSync(path.join(tmpdir(), 'mcprl-coverage-')) : undefined;
  for (const [name, text] of Object.entries(s.files ?? {})) writeFileSync(path.join(sandboxFrom!, name), text);
  const safety = new SafetyPolicy({ allowDestructive: s.allowDestructive ?? false });
  const opts = { sandboxFrom, policy: safety, stateInMemory: inMemory(s) };
  try {
    const session = await connect(s.target, opts);
    let r;
    let quality;
    try {
      r = await generateOfflineScenarios(session, { count, seed, isolatedServer: () => connect(s.target, { ...opts, isolated: true }) });
      // As `mcprl scenarios` measures it: the oracle's and the random agent's read-only calls on the same server.
      quality = await measureQuality(session, r.scenarios, { seed });
    } finally {
      await session.close();
    }
    if (flags['scenarios-out']) {
      const file = path.join(flags['scenarios-out'], `${s.server.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase()}.jsonl`);
      await writeFileAtomic(file, r.scenarios.map((sc) => JSON.stringify(sc) + '\n').join(''));
    }
    const byDifficulty: CoverageRow['byDifficulty'] = [0, 0, 0, 0, 0];
    for (const sc of r.scenarios) byDifficulty[sc.difficulty - 1]++;
    const oracle = await agentScores(s, sandboxFrom, safety, r.scenarios, goodStrategy(r.scenarios));
    const idle = await agentScores(s, sandboxFrom, safety, r.scenarios, scriptedStrategy([], ''));
    return {
      server: s.server,
      toolsCovered: r.coverage.filter((c) => c.scenarios > 0).length,
      tools: r.coverage.length,
      uncovered: r.coverage.filter((c) => c.scenarios === 0).map((c) => ({ tool: c.tool, reason: c.reason, reasons: c.reasons })),
      scenarios: r.scenarios.length,
      asked: count,
      byDifficulty,
      withStateCheck: r.scenarios.filter((sc) => sc.checks?.some(isStateCheck)).length,
      oracle,
      idle,
      quality,
      seconds: Math.round((Date.now() - t0) / 1000),
    };
  } finally {
    if (sandboxFrom) rmSync(sandboxFrom, { recursive: true, force: true });
  }
}

const pct = (x: { passed: number; total: number }) => (x.total ? `${((100 * x.passed) / x.total).toFixed(0)} %` : '–');

const HEADER = [
  '| server | tools with ≥ 1 scenario | scenarios of ' + count + ' | difficulty 1/2/3/4/5 | with a state check | oracle passes | do-nothing passes | name a tool | chains | read-only: oracle passes, do-nothing fails | read-only: one random call passes | not covered (reason) |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|',
].join('\n');

/** "nothing_to_ask", or with several stages each with its count: "nothing_to_ask ×12, replay_failed ×1". */
export function uncoveredReason(u: CoverageRow['uncovered'][number]): string {
  const counts = Object.entries(u.reasons ?? {});
  return counts.length > 1 ? counts.map(([r, n]) => `${r} ×${n}`).join(', ') : (u.reason ?? '?');
}

export function markdownRow(r: CoverageRow): string {
  const share = r.scenarios ? ` (${((100 * r.withStateCheck) / r.scenarios).toFixed(0)} %)` : '';
  const q = r.quality;
  const uncovered = r.uncovered.map((u) => `${u.tool} (${uncoveredReason(u)})`).join(', ') || '–';
  return `| ${r.server} | ${r.toolsCovered}/${r.tools} | ${r.scenarios} | ${r.byDifficulty.join('/')} | ${r.withStateCheck}${share} | ${pct(r.oracle)} | ${pct(r.idle)} | ${q.namingTool} | ${q.chains} | ${q.oraclePassIdleFail}/${q.measured} | ${q.randomPass}/${q.measured} | ${uncovered} |`;
}

export function markdown(rows: CoverageRow[]): string {
  return [HEADER, ...rows.map(markdownRow)].join('\n');
}

const setups = chosenSetups();
const rows: CoverageRow[] = [];
if (!flags.json) process.stdout.write(HEADER + '\n');
for (const [i, s] of setups.entries()) {
  process.stderr.write(`coverage-table: [${i + 1}/${setups.length}] measuring ${s.server}…\n`);
  const row = await measure(s);
  rows.push(row);
  process.stderr.write(`coverage-table: [${i + 1}/${setups.length}] ${s.server} measured in ${row.seconds} s\n${markdownRow(row)}\n`);
  if (!flags.json) process.stdout.write(markdownRow(row) + '\n');
  // Rewritten after every row (atomically), so a stopped run keeps what it measured.
  if (flags['json-out']) await writeFileAtomic(flags['json-out'], JSON.stringify(rows, null, 2) + '\n');
}
if (flags.json) process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
