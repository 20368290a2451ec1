/**
 * Shows what a model does on scenarios, turn by turn, with the in-process engine (for tuning the tiny model):
 *   node --import tsx scripts/tiny-model/probe.ts MODEL_DIR SCENARIO_DIR [val|train|test] [N] [TEMPERATURE] [constrained]
 * (`constrained`: tool calls decoded under the tools' schemas, as `npm run demo` trains and validates)
 */
import { runEval } from '../../src/eval/evaluate.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { EnginePolicy } from '../../src/agent/engine-policy.js';
import type { Model } from '../../src/engine/model.js';
import { loadScenarioSet } from '../../src/scenarios/index.js';
import { fixtureTarget } from './fixture-target.js';

const [dir, scenarioDir, split = 'val', n = '8', temperature = '0', constrained] = process.argv.slice(2);
if (!dir || !scenarioDir) {
  console.error('usage: probe.ts MODEL_DIR SCENARIO_DIR [val|train|test] [N] [TEMPERATURE] [constrained]');
  process.exit(1);
}
const engine = await ChatEngine.load(dir);
const sets = await loadScenarioSet(scenarioDir);
const { groups, summary } = await runEval({
  policy: new EnginePolicy(engine, { maxTokens: 160, temperature: Number(temperature), constrainToolCalls: constrained === 'constrained' }), target: fixtureTarget(), scenarios: sets[split as 'val' | 'train' | 'test'].slice(0, Number(n)),
  reward: 'checks', rolloutsPerGroup: 1, concurrency: 8, maxTurns: 4,
});
for (const t of groups.flat()) {
  console.log(`--- reward ${t.reward.toFixed(2)}: ${t.messages[1].content}`);
  for (const m of t.messages.slice(2)) {
    const calls = m.tool_calls?.map((c) => `${c.function.name}(${c.function.arguments})`).join(' ') ?? '';
    console.log(`  ${m.role}: ${(m.content ?? '').slice(0, 150).replace(/\n/g, ' ')} ${calls}`);
  }
}
console.log(`success ${summary.success_rate}, tool-call validity ${summary.tool_call_validity_rate}`);
(engine.model as Model).close();
