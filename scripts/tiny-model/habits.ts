/**
 * What a tiny model does with the bookshop's tasks when it samples: how often it looks things up rather than
 * answering at once (guess), how often it reports what it found rather than "Done." (forget), and how often a
 * full attempt (looked up and reported) succeeds — the model's skill apart from its habits. Run on a model folder
 * before and after RL (an adapter given by --adapter) to see which of the two RL changed.
 *
 *   node --import tsx scripts/tiny-model/habits.ts --model DIR [--adapter DIR] [--set test] [--temperature 0.7] [--attempts 4] [--constrain]
 */
import { join, resolve } from 'node:path';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { EnginePolicy } from '../../src/agent/engine-policy.js';
import type { McpTrajectory } from '../../src/agent/trajectory.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { isSuccess, runEval } from '../../src/eval/evaluate.js';
import { parseScenarios } from '../../src/scenarios/scenario.js';
import { fixtureTarget } from './fixture-target.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(ROOT, 'fixtures', 'models', 'tiny-bookshop') },
    adapter: { type: 'string' },
    scenarios: { type: 'string', default: join(ROOT, 'fixtures', 'scenarios', 'bookshop') },
    set: { type: 'string', default: 'test' },
    temperature: { type: 'string', default: '0.7' },
    attempts: { type: 'string', default: '4' },
    constrain: { type: 'boolean', default: false },
  },
});

/** guess: the first turn ends the task; forget: the final answer is "Done."; full: anything else. */
export function habitOf(t: McpTrajectory): 'guess' | 'forget' | 'full' {
  const first = t.messages.find((m) => m.role === 'assistant');
  if (first?.tool_calls?.[0]?.function.name === 'complete_task') return 'guess';
  return /^\s*done\.?\s*$/i.test(t.final_answer ?? '') ? 'forget' : 'full';
}

const file = join(values.scenarios!, `${values.set}.jsonl`);
const scenarios = parseScenarios(await readFile(file, 'utf8'), file);
const engine = await ChatEngine.load(values.model!, values.adapter ? { adapters: [{ name: 'rl', dir: values.adapter }] } : {});
const { groups } = await runEval({
  policy: new EnginePolicy(engine, { maxTokens: 128, temperature: Number(values.temperature), constrainToolCalls: values.constrain, ...(values.adapter ? { model: 'rl' } : {}) }), target: fixtureTarget(), scenarios, reward: 'checks',
  rolloutsPerGroup: Number(values.attempts), concurrency: 8, maxTurns: 4, seed: 1,
});
const tally = { guess: 0, forget: 0, full: 0, fullSolved: 0, solved: 0, all: 0 };
for (const t of groups.flat()) {
  const h = habitOf(t);
  tally[h]++;
  tally.all++;
  const ok = isSuccess(t);
  if (ok) tally.solved++;
  if (ok && h === 'full') tally.fullSolved++;
  if (process.env.HABITS_SHOW && h === 'full' && !ok) console.log(JSON.stringify(t.messages.slice(2).map((m) => (m.role === 'tool' ? `T: ${String(m.content).slice(0, 120)}` : `A: ${m.content ?? ''} ${JSON.stringify(m.tool_calls?.map((c) => c.function))}`))));
}
const pct = (a: number, b: number) => `${((100 * a) / Math.max(1, b)).toFixed(1)}%`;
console.log(JSON.stringify({ set: values.set, attempts: tally.all, guess: pct(tally.guess, tally.all), forget: pct(tally.forget, tally.all), full: pct(tally.full, tally.all), solved: pct(tally.solved, tally.all), solved_when_full: pct(tally.fullSolved, tally.full) }));
(engine.model as { close(): void }).close();
