/**
 * Shows what a model does on scenarios, turn by turn, with the in-process engine (for tuning the tiny model):
 *   node --import tsx scripts/tiny-model/probe.ts MODEL_DIR SCENARIO_DIR [--split val] [--n 8] [--temperature 0]
 *     [--rollouts 1] [--constrained] [--target bookshop|memory|filesystem] [--quiet]
 * `--constrained`: tool calls decoded under the tools' schemas, as `npm run demo` trains and validates.
 * `--target memory|filesystem`: the demo's published server (scripts/demo-targets.ts), each rollout on a sandboxed
 * copy of the demo's data, as `npm run demo -- --target …` runs it. It ends with what the first move of each attempt
 * was and how many attempts earned any reward: whether GRPO would find groups that differ.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runEval } from '../../src/eval/evaluate.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { EnginePolicy } from '../../src/agent/engine-policy.js';
import type { Model } from '../../src/engine/model.js';
import type { Target } from '../../src/mcp/index.js';
import { loadScenarioSet } from '../../src/scenarios/index.js';
import { publishedTarget, writeTargetInputs } from '../demo-targets.js';
import { fixtureTarget } from './fixture-target.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    split: { type: 'string', default: 'val' },
    n: { type: 'string', default: '8' },
    temperature: { type: 'string', default: '0' },
    rollouts: { type: 'string', default: '1' },
    constrained: { type: 'boolean', default: false },
    target: { type: 'string', default: 'bookshop' },
    quiet: { type: 'boolean', default: false },
  },
});
const [dir, scenarioDir] = positionals;
if (!dir || !scenarioDir) {
  console.error('usage: probe.ts MODEL_DIR SCENARIO_DIR [--split val] [--n 8] [--temperature 0] [--rollouts 1] [--constrained] [--target bookshop|memory|filesystem] [--quiet]');
  process.exit(1);
}
if (!['bookshop', 'memory', 'filesystem'].includes(values.target!)) throw new Error(`--target ${values.target}: expected bookshop, memory or filesystem`);

let target: Target = fixtureTarget();
let isolation = {};
if (values.target !== 'bookshop') {
  const published = publishedTarget(values.target as 'memory' | 'filesystem');
  const { source } = await writeTargetInputs(published, await mkdtemp(join(tmpdir(), 'mcprl-probe-')));
  target = { kind: 'stdio', ...published.server };
  isolation = { isolate: true, sandboxFrom: source };
}

const engine = await ChatEngine.load(dir);
const sets = await loadScenarioSet(scenarioDir);
const { groups, summary } = await runEval({
  policy: new EnginePolicy(engine, { maxTokens: 128, temperature: Number(values.temperature), constrainToolCalls: values.constrained }),
  target, ...isolation, scenarios: sets[values.split as 'val' | 'train' | 'test'].slice(0, Number(values.n)),
  reward: 'checks', rolloutsPerGroup: Number(values.rollouts), concurrency: 32, maxTurns: 4, seed: 1,
});
const firstMoves = new Map<string, number>();
let rewarded = 0;
let groupsThatDiffer = 0;
for (const group of groups) {
  if (new Set(group.map((t) => t.reward)).size > 1) groupsThatDiffer++;
  for (const t of group) {
    if (t.reward > 0) rewarded++;
    const first = t.messages.find((m) => m.role === 'assistant');
    const move = first?.tool_calls?.[0]?.function.name ?? (first ? 'text' : 'none');
    firstMoves.set(move, (firstMoves.get(move) ?? 0) + 1);
    if (values.quiet) continue;
    console.log(`--- reward ${t.reward.toFixed(2)}: ${t.messages[1].content}`);
    for (const m of t.messages.slice(2)) {
      const calls = m.tool_calls?.map((c) => `${c.function.name}(${c.function.arguments})`).join(' ') ?? '';
      console.log(`  ${m.role}: ${(m.content ?? '').slice(0, 150).replace(/\n/g, ' ')} ${calls}`);
    }
  }
}
const attempts = groups.flat().length;
console.log(`first moves: ${[...firstMoves].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(', ')}`);
console.log(`attempts with any reward ${rewarded}/${attempts}, groups that differ ${groupsThatDiffer}/${groups.length}, success ${summary.success_rate}, tool-call validity ${summary.tool_call_validity_rate}`);
(engine.model as Model).close();
