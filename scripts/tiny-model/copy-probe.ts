/**
 * A noise-free probe of the general tiny model (for tuning its recipe in minutes rather than a build and a demo):
 * teacher-forced log-probabilities, no sampling, so two models compare on the same tokens.
 *   node --import tsx scripts/tiny-model/copy-probe.ts MODEL_DIR... [--scenarios memory=DIR] [--scenarios filesystem=DIR]
 *     [--temperature 1.2] [--n 200] [--show K: each set's first K examples token by token]
 * - copies: open copy drills (open-drills.ts, a fixed seed no build draws), copies of the first model's own word
 *   tokens (wordTokens: what a drill of everyday and made-up words never holds) and copies of a sandbox path of the
 *   filesystem demo, alone and after the demo's system prompt and each server's tool list: the mean negative
 *   log-probability per answer token, and the mean probability that a sample at the temperature reproduces the
 *   whole answer;
 * - calls: each demo TRAINING task's first correct call, as the general expert would make it from the task's
 *   checks (measurement only: nothing here trains), after the demo's system prompt, its server's real tool list
 *   and the task, and the first call of 24 fresh open drills: the probability of the tool's name, the mean negative
 *   log-probability per argument token, and the probability of the whole call, each token renormalised over what
 *   the tool-call grammar allows there (as the demo decodes calls: a tool's name and the schema's keys are forced
 *   once they are the only way on).
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { ChatMessage } from '../../src/agent/policy.js';
import { COMPLETE_TASK_TOOL, DEFAULT_SYSTEM_PROMPT } from '../../src/agent/rollout.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { replayMasks } from '../../src/chat/constrain.js';
import type { Model } from '../../src/engine/model.js';
import { connect } from '../../src/mcp/index.js';
import { toOpenAITools } from '../../src/mcp/openai-tools.js';
import type { OpenAITool } from '../../src/mcp/openai-tools.js';
import { loadScenarioSet } from '../../src/scenarios/index.js';
import { trajectoryToSequences } from '../../src/train/tokenize.js';
import { makeRng } from '../random-model.js';
import { publishedTarget, writeTargetInputs } from '../demo-targets.js';
import { int, pick } from './copy-drills.js';
import { plannedCalls } from './general-expert.js';
import { openCopyDrill, openDrill, wordTokens } from './open-drills.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { scenarios: { type: 'string', multiple: true, default: [] }, temperature: { type: 'string', default: '1.2' }, n: { type: 'string', default: '200' }, show: { type: 'string', default: '0' } },
});
if (positionals.length === 0) throw new Error('usage: copy-probe.ts MODEL_DIR... [--scenarios memory=DIR] [--scenarios filesystem=DIR] [--temperature 1.2] [--n 200]');
const temperature = Number(values.temperature);

type Rng = ReturnType<typeof makeRng>;
const alnum = (rng: Rng) => Array.from({ length: 6 }, () => pick(rng, [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'])).join('');
/** A sandbox path of the filesystem demo, as its tasks quote them. */
const FILES = ['', 'todo.txt', 'budget.json', 'README.md', 'recipes.md', 'trips', 'trips/porto.md', 'trips/packing.txt', 'trips/photos', 'trips/photos/harbour.png'];
function sandboxCopy(rng: Rng): ChatMessage[] {
  const path = [`/tmp/mcprl-sandbox-${alnum(rng)}`, pick(rng, FILES)].filter(Boolean).join('/');
  return [{ role: 'user', content: `${pick(rng, ['Repeat exactly', 'Copy these values', 'Say back', 'Echo'])}: "${path}"` }, { role: 'assistant', content: path }];
}

/** Each example's answer tokens' logprobs at the temperature, and where its arguments start (calls only). */
async function score(engine: ChatEngine, examples: { messages: ChatMessage[]; tools: OpenAITool[] }[]) {
  const seqs = examples.map((e) => trajectoryToSequences(engine, e)[0]);
  // a call's tokens renormalised over what the tool-call grammar allows there, as the demo decodes them
  const tokenMasks = seqs.map((s, i) => {
    if (examples[i].tools.length === 0) return undefined;
    const first = s.mask.indexOf(1);
    const replayed = replayMasks(engine.toolCallConstrainer(examples[i].tools), s.tokenIds.slice(first));
    return [...s.tokenIds.slice(0, first).map(() => null), ...replayed];
  });
  const lps = await (engine.model as Model).score(seqs.map((s) => s.tokenIds), { temperatures: seqs.map(() => temperature), tokenMasks });
  return seqs.map((s, i) => {
    const idx = s.mask.flatMap((m, t) => (m ? [t] : []));
    // the call's name ends where the decoded answer first holds `"arguments": `
    const split = idx.findIndex((_, k) => engine.tokenizer.decode(idx.slice(0, k + 1).map((t) => s.tokenIds[t])).includes('"arguments": '));
    if (i < Number(values.show)) console.log(idx.map((t) => `${JSON.stringify(engine.tokenizer.decode([s.tokenIds[t]]))} ${lps[i][t].toFixed(2)}`).join(' · '));
    return { lp: idx.map((t) => lps[i][t]), split: split < 0 ? idx.length : split + 1 };
  });
}
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const mean = (xs: number[]) => (xs.length ? sum(xs) / xs.length : NaN);
const f = (x: number, d = 3) => x.toFixed(d);

// the examples, the same for every model
const rng = makeRng(424242);
const drills = Array.from({ length: Number(values.n) }, () => ({ messages: openCopyDrill(rng), tools: [] }));
const paths = Array.from({ length: Math.round(Number(values.n) / 2) }, () => ({ messages: sandboxCopy(rng), tools: [] }));
const first = await ChatEngine.load(positionals[0]);
const vocabulary = wordTokens((id) => first.tokenizer.decode([id]), (first.model as Model).config.vocabSize);
(first.model as Model).close();
// a stream of its own: the other sets are the examples they were before this one existed
const vocabRng = makeRng(434343);
const vocabCopies = Array.from({ length: Math.round(Number(values.n) / 2) }, () => {
  const items = Array.from({ length: int(vocabRng, 1, 3) }, () => Array.from({ length: int(vocabRng, 1, 3) }, () => pick(vocabRng, vocabulary)).join(' '));
  return { messages: [{ role: 'user' as const, content: `Repeat exactly: ${items.map((v) => `"${v}"`).join(', ')}` }, { role: 'assistant' as const, content: items.join(', ') }], tools: [] };
});
const calls: Record<string, { messages: ChatMessage[]; tools: OpenAITool[] }[]> = {};
for (const spec of values.scenarios!) {
  const [name, dir] = spec.split('=');
  if (name !== 'memory' && name !== 'filesystem') throw new Error(`--scenarios ${spec}: expected memory=DIR or filesystem=DIR`);
  const published = publishedTarget(name);
  const { source } = await writeTargetInputs(published, await mkdtemp(join(tmpdir(), 'mcprl-copy-probe-')));
  const env = published.server.env && Object.fromEntries(Object.entries(published.server.env).map(([k, v]) => [k, v.replace('{sandbox}', source)]));
  const session = await connect({ kind: 'stdio', command: published.server.command, args: published.server.args.map((a) => a.replace('{sandbox}', source)), ...(env ? { env } : {}) });
  const tools = [...toOpenAITools(await session.listTools()), COMPLETE_TASK_TOOL];
  await session.close();
  calls[name] = [];
  for (const s of (await loadScenarioSet(dir)).train) {
    const call = plannedCalls(s)[0];
    if (!call) continue;
    const sandbox = `/tmp/mcprl-sandbox-${alnum(rng)}`;
    const fill = (text: string) => text.replaceAll('{sandbox}', sandbox);
    calls[name].push({
      tools,
      messages: [
        { role: 'system', content: DEFAULT_SYSTEM_PROMPT },
        { role: 'user', content: fill(s.task) },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: call.name, arguments: fill(JSON.stringify(call.args)) } }] },
      ],
    });
  }
}

// the same path copies after the demo's system prompt and a published server's tool list: copying at a call's distance
const listed = Object.entries(calls).map(([k, v]) => [k, paths.map((p) => ({ messages: [v[0].messages[0], ...p.messages], tools: v[0].tools }))] as const);
// the first call of fresh open drills (a stream no build draws): the model on the kind of task it was trained on,
// beside the published servers' calls, so that a model that fits neither is told from one that does not transfer
const drillRng = makeRng(454545);
calls['open drills'] = Array.from({ length: 24 }, () => {
  const d = openDrill(drillRng);
  return { tools: d.tools, messages: d.messages.slice(0, d.messages.findIndex((m) => m.role === 'assistant') + 1) };
});
console.log(`temperature ${temperature}; copies: ${drills.length} open copy drills, ${vocabCopies.length} of word tokens, ${paths.length} sandbox paths; calls: ${Object.entries(calls).map(([k, v]) => `${k} ${v.length}`).join(', ')}`);
console.log('| model | open copies: nll/token, P(all) | word tokens: nll/token, P(all) | sandbox paths: nll/token, P(all) | ' + listed.map(([k]) => `sandbox paths after ${k}'s tool list`).join(' | ') + ' | ' + Object.keys(calls).map((k) => `${k}: P(name), args nll/token, P(call), P(call)>0.1`).join(' | ') + ' |');
for (const dir of positionals) {
  const engine = await ChatEngine.load(dir);
  const row = [dir];
  for (const set of [drills, vocabCopies, paths, ...listed.map(([, v]) => v)]) {
    const r = await score(engine, set);
    row.push(`${f(mean(r.map((x) => -mean(x.lp))))}, ${f(mean(r.map((x) => Math.exp(sum(x.lp)))))}`);
  }
  for (const set of Object.values(calls)) {
    const r = await score(engine, set);
    const whole = r.map((x) => Math.exp(sum(x.lp)));
    row.push(`${f(mean(r.map((x) => Math.exp(sum(x.lp.slice(0, x.split))))))}, ${f(mean(r.map((x) => -mean(x.lp.slice(x.split)))))}, ${f(mean(whole), 4)}, ${whole.filter((p) => p > 0.1).length}/${whole.length}`);
  }
  console.log(`| ${row.join(' | ')} |`);
  (engine.model as Model).close();
}
