/**
 * Makes the bundled tiny model, deterministically, from nothing but this repository:
 *   1. four disjoint scenario sets from the bookshop fixture server (warm-up / RL train / validation / test);
 *   2. warm-up transcripts: a scripted policy works each warm-up scenario through the real rollout loop, with a
 *      mix of habits (expert.ts): it always knows how to use the tools, but only sometimes looks things up
 *      rather than guessing, and only sometimes reports what it found;
 *   3. a byte-level BPE tokenizer trained on those transcripts, a fixed text (tokenizer-corpus.md, a frozen
 *      snapshot of an early README: training text only, not documentation) and the fixture's catalogue, with
 *      digits one by one as Qwen's tokenizer splits them (every id is made of the same ten tokens; `--digits
 *      grouped` groups them in threes, as the first bundled models did);
 *   4. a randomly initialised Qwen3-shaped model using that tokenizer and a compact Hermes-style template;
 *   5. SFT warm-up with the engine's own sftStep: high-rank LoRA on every projection, merged into the base
 *      weights after each cycle (the engine trains LoRA weights only); every batch also holds synthetic copy
 *      drills (copy-drills.ts), the generic copying a pretrained model would bring, and every batch of the skill
 *      cycles tool drills (tool-drills.ts: made-up tools and domains), the generic tool use it would bring;
 *   6. validation and test success of the result, measured the way `mcprl train` measures it.
 * The warm-up teaches the skills but not the habits that earn the reward, so the model often fails: room for RL.
 *
 *   node --import tsx scripts/tiny-model/build.ts [--out fixtures/models/tiny-bookshop] [--seed 1] [--tokenizer FILE]
 *
 * `--recipe general` warms up on many synthetic MCP servers too (synthetic-servers.ts, worked by general-expert.ts;
 * never server-memory or server-filesystem, which it is then trained on by GRPO), with a tokenizer also trained on
 * the markdown docs of node_modules, copy drills over open vocabularies and open tool drills (open-drills.ts: tools,
 * keys and values made up for every drill), and no habit cycle; RECIPES below holds what else it changes
 * (docs/tiny-model.md).
 *
 * The defaults make the bundled model (built so at commit b526be3, docs/tiny-model.md). `--tokenizer FILE` skips
 * step 3 and uses that tokenizer.json (fixtures/models/tiny-bookshop-v1's was trained on a README draft that no
 * longer exists, so its own tokenizer, copied out of the folder first, is how that model is rebuilt).
 */
import { cp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_SYSTEM_PROMPT, rollout } from '../../src/agent/rollout.js';
import { runEval } from '../../src/eval/evaluate.js';
import type { McpTrajectory } from '../../src/agent/trajectory.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { ChatTemplate } from '../../src/chat/chat-template.js';
import { EnginePolicy } from '../../src/agent/engine-policy.js';
import { LORA_TARGETS } from '../../src/hf/peft.js';
import { Trainer } from '../../src/engine/trainer.js';
import type { TrainSequence } from '../../src/engine/train-types.js';
import { mergeAdapter } from '../../src/export/merge.js';
import { connect } from '../../src/mcp/index.js';
import { formatScenarios, type Scenario } from '../../src/scenarios/index.js';
import { learningRate, type LrSchedule } from '../../src/train/step-settings.js';
import { trajectoryToSequences } from '../../src/train/tokenize.js';
import { writeJsonAtomic } from '../../src/util/atomic.js';
import { makeRandomModel, makeRng } from '../random-model.js';
import { AUTHORS, BOOKS } from '../../fixtures/server/bookshop.js';
import { GROUPED_DIGITS_SPLIT_REGEX, QWEN_SPLIT_REGEX, trainByteLevelBpe } from './bpe.js';
import { copyDrill } from './copy-drills.js';
import { toolDrill } from './tool-drills.js';
import { openCopyDrill, openDrill, withVocabulary, wordTokens } from './open-drills.js';
import { HfTokenizer } from '../../src/chat/tokenizer.js';
import type { Habit } from './expert.js';
import { scoreChecks } from '../../src/ruler/checks.js';
import { fixtureTarget } from './fixture-target.js';
import { DEFAULT_SET_SIZES, drawWarmup, makeScenarioSets } from './scenario-sets.js';
import { GeneralExpertPolicy } from './general-expert.js';
import { docsCorpus, syntheticWarmup } from './synthetic-warmup.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const { values } = parseArgs({
  options: {
    /** Default: fixtures/models/<the recipe's folder> and fixtures/scenarios/<its scenario folder> (RECIPE_FOLDERS). */
    out: { type: 'string' },
    scenarios: { type: 'string' },
    work: { type: 'string', default: join(ROOT, '.cache', 'tiny-model') },
    seed: { type: 'string', default: '1' },
    /** `bookshop` (the bundled model) or `general` (see the module comment); the defaults of each are in RECIPES. */
    recipe: { type: 'string', default: 'bookshop' },
    vocab: { type: 'string' },
    cycles: { type: 'string' },
    'steps-per-cycle': { type: 'string' },
    /** The model's width, layers and MLP width. */
    hidden: { type: 'string' },
    layers: { type: 'string' },
    intermediate: { type: 'string' },
    /** general: the synthetic servers warmed up on, and the scenarios asked of each. */
    'synthetic-servers': { type: 'string' },
    'synthetic-per-server': { type: 'string' },
    /** general: characters of node_modules' markdown docs the tokenizer also learns from. */
    'docs-chars': { type: 'string' },
    /** The last N cycles train on the habit-mixed transcripts; the ones before on the expert's alone (skills first).
     *  The general recipe has none: its habit cycle taught "I don't know." on every tool list it did not recognise. */
    'habit-cycles': { type: 'string' },
    /** A model folder that already went through the drill phase of this same build (skips it; same result). */
    drilled: { type: 'string' },
    'batch-size': { type: 'string', default: '16' },
    lr: { type: 'string', default: '2e-3' },
    rank: { type: 'string', default: '128' },
    threads: { type: 'string' },
    'eval-each-cycle': { type: 'boolean', default: false },
    drills: { type: 'string', default: '16' },
    /** Tool drills (tool-drills.ts) per batch of the skill cycles: generic tool use on made-up domains. */
    'tool-drills': { type: 'string', default: '16' },
    /** Open tool drills (open-drills.ts) per batch of the skill cycles: tools and values made up afresh each time. */
    'open-drills': { type: 'string' },
    /** The share of the skill cycles' copy drills that come after the system prompt and an open drill's tool list. */
    'copy-context': { type: 'string' },
    /** The share of copy drills (drill phase and every batch) that copy open-vocabulary values (open-drills.ts). */
    'open-copy': { type: 'string' },
    /** The share of the open drills' words drawn from the model's own word tokens (open-drills.ts withVocabulary). */
    'vocab-words': { type: 'string' },
    /** Habit mix of the warm-up transcripts: the share that look things up, and of those the share that report. */
    'lookup-rate': { type: 'string', default: '0.45' },
    'report-rate': { type: 'string', default: '0.5' },
    'drill-steps': { type: 'string' },
    /** Copy-drill steps after the drill phase (after `--drilled` too), in rounds of DRILL_ROUND steps, each with a
     *  fresh adapter and optimiser merged into the model after it (see RECIPES). */
    'drill-more': { type: 'string' },
    /** Use this tokenizer.json instead of training one (e.g. the bundled model's, to rebuild it exactly). */
    tokenizer: { type: 'string' },
    /** How the tokenizer splits digits: `single` one by one (as Qwen's does), `grouped` in runs of up to three. */
    digits: { type: 'string', default: 'single' },
    /** Also warm up on N made-up catalogues of the same server (fixtures/server/bookshop.ts madeUpCatalogue). */
    'warmup-catalogues': { type: 'string' },
    'warmup-per-catalogue': { type: 'string', default: '150' },
  },
});
const seed = Number(values.seed);

/**
 * Each recipe's defaults for the options it sets; an option given on the command line wins. The general recipe's
 * steps are sized so that its build, with 24 synthetic servers' transcripts on top, stays well under an hour on a
 * shared two-core machine (docs/tiny-model.md has the times).
 */
const RECIPES = {
  bookshop: {
    vocab: '1024', cycles: '5', 'steps-per-cycle': '300', 'drill-steps': '1500', 'warmup-catalogues': '4', hidden: '128', layers: '4', intermediate: '384',
    'synthetic-servers': '0', 'synthetic-per-server': '0', 'docs-chars': '0', 'habit-cycles': '1', 'open-drills': '0', 'open-copy': '0', 'drill-more': '0', 'copy-context': '0', 'vocab-words': '0',
  },
  general: {
    vocab: '2048', cycles: '3', 'steps-per-cycle': '160', 'drill-steps': '2000', 'warmup-catalogues': '2', hidden: '128', layers: '4', intermediate: '384',
    'synthetic-servers': '24', 'synthetic-per-server': '40', 'docs-chars': '600000', 'habit-cycles': '0', 'open-drills': '16', 'open-copy': '0.5',
    // the copy loss still falls after the drill phase, fastest just after a fresh adapter and optimiser start
    'drill-more': '1000',
    // a model drilled on short chats alone copies far worse after a published server's tool list (docs/tiny-model.md)
    'copy-context': '0.5',
    // the tokenizer's whole-word tokens (" Lindqvist", " March") are copied at 4 nats a token when no drill holds them
    'vocab-words': '0.5',
  },
} as const;
/** Steps of each round of `--drill-more`. */
const DRILL_ROUND = 250;
type RecipeOption = keyof (typeof RECIPES)['bookshop'];
/** Where each recipe writes by default: the general model never lands on the bundled one. */
const RECIPE_FOLDERS = { bookshop: { model: 'tiny-bookshop', scenarios: 'bookshop' }, general: { model: 'tiny-general', scenarios: 'general' } } as const;
if (!(values.recipe! in RECIPES)) throw new Error(`--recipe ${values.recipe}: expected one of ${Object.keys(RECIPES).join(', ')}`);
const recipe = RECIPES[values.recipe as keyof typeof RECIPES];
const opt = (k: RecipeOption) => Number(values[k] ?? recipe[k]);
const outDir = values.out ?? join(ROOT, 'fixtures', 'models', RECIPE_FOLDERS[values.recipe as keyof typeof RECIPES].model);
const scenarioDir = values.scenarios ?? join(ROOT, 'fixtures', 'scenarios', RECIPE_FOLDERS[values.recipe as keyof typeof RECIPES].scenarios);
const work = values.work!;
const log = (msg: string) => console.error(`[tiny-model ${new Date().toISOString().slice(11, 19)}] ${msg}`);


const SPECIAL = [
  { content: '<|endoftext|>', special: true },
  { content: '<|im_start|>', special: true },
  { content: '<|im_end|>', special: true },
  { content: '<tool_call>', special: false },
  { content: '</tool_call>', special: false },
  { content: '<tool_response>', special: false },
  { content: '</tool_response>', special: false },
];

async function main() {
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });

  // 1. scenario sets
  const session = await connect(fixtureTarget());
  const tools = await session.listTools();
  // questions are checked by the value asked (answer_value), not by a named call: their calls are read from `via`
  const callsFrom = 'via';
  const sets = await makeScenarioSets(session, seed, DEFAULT_SET_SIZES, callsFrom);
  log(`scenarios: warm-up ${sets.warmup.length}, train ${sets.train.length}, val ${sets.val.length}, test ${sets.test.length}`);

  // 2. warm-up transcripts: the expert's for every scenario (it must solve each), and one with a habit drawn
  //    from the mix
  const habitRng = makeRng(seed + 1000);
  const habits: Record<Habit, number> = { expert: 0, guess: 0, forget: 0 };
  const drawHabit = (): Habit => (habitRng.uniform() >= Number(values['lookup-rate']) ? 'guess' : habitRng.uniform() < Number(values['report-rate']) ? 'expert' : 'forget');
  const transcripts: McpTrajectory[] = [];
  const mixed: McpTrajectory[] = [];
  // the expert reads any scenario's checks (calls and the values' `via`); a scenario it cannot solve is left out
  let unsolved = 0;
  const run = async (scenario: Scenario, habit: Habit, on = session) => {
    const t = await rollout({ policy: new GeneralExpertPolicy(scenario, habit), session: on, tools, scenario, id: `warmup-${scenario.id}` });
    if (!t.metrics.completed || t.error) throw new Error(`the ${habit} policy did not finish warm-up scenario ${scenario.id}: ${t.error ?? 'not completed'}`);
    if (habit === 'expert' && scoreChecks(t, scenario).fraction < 1) return undefined;
    return t;
  };
  const warm = async (scenario: Scenario, on = session) => {
    const t = await run(scenario, 'expert', on);
    if (!t) return void unsolved++;
    const habit = drawHabit();
    habits[habit]++;
    transcripts.push(t);
    mixed.push((await run(scenario, habit, on))!);
  };
  for (const scenario of sets.warmup) await warm(scenario);
  // the same warm-up on made-up catalogues: other ids, titles and names, so the model must read what tools return
  const madeUp: Scenario[] = [];
  for (let k = 1; k <= opt('warmup-catalogues'); k++) {
    const other = await connect(fixtureTarget(k));
    for (const scenario of await drawWarmup(other, seed + 100 * k, Number(values['warmup-per-catalogue']), callsFrom)) {
      madeUp.push(scenario);
      await warm(scenario, other);
    }
    await other.close();
  }
  await session.close();
  // the general recipe: the same on synthetic servers of many shapes and domains (never the held-out published ones)
  const synthetic = await syntheticWarmup({ servers: opt('synthetic-servers'), perServer: opt('synthetic-per-server'), seed: seed + 5000, habitFor: drawHabit, log });
  for (const [h, n] of Object.entries(synthetic.habits)) habits[h as Habit] += n;
  transcripts.push(...synthetic.transcripts);
  mixed.push(...synthetic.mixed);
  log(`warm-up transcripts: ${transcripts.length} expert (${synthetic.transcripts.length} on synthetic servers; left out unsolved: ${unsolved} bookshop, ${synthetic.unsolved} synthetic); habit mix ${habits.expert} expert, ${habits.guess} guess, ${habits.forget} forget`);

  // 3. tokenizer
  const template = await readFile(join(import.meta.dirname, 'chat_template.jinja'), 'utf8');
  const renderer = new ChatTemplate(template);
  const vocabSize = opt('vocab');
  let tokenizerJson;
  if (values.tokenizer) {
    tokenizerJson = JSON.parse(await readFile(values.tokenizer, 'utf8'));
    const ids = [...Object.values(tokenizerJson.model.vocab as Record<string, number>), ...(tokenizerJson.added_tokens as { id: number }[]).map((t) => t.id)];
    if (Math.max(...ids) + 1 !== vocabSize) throw new Error(`--tokenizer ${values.tokenizer}: its ids reach ${Math.max(...ids)}, but --vocab is ${vocabSize}`);
  } else {
    const texts = transcripts.map((t) => renderer.render(t.messages, { tools: t.tools, addGenerationPrompt: false }));
    texts.push(await readFile(join(import.meta.dirname, 'tokenizer-corpus.md'), 'utf8'), JSON.stringify({ books: BOOKS, authors: AUTHORS }, null, 2));
    if (opt('docs-chars') > 0) texts.push(...(await docsCorpus(ROOT, opt('docs-chars'))));
    const splitRegex = { single: QWEN_SPLIT_REGEX, grouped: GROUPED_DIGITS_SPLIT_REGEX }[values.digits!];
    if (!splitRegex) throw new Error(`--digits ${values.digits}: expected single or grouped`);
    tokenizerJson = trainByteLevelBpe(texts, { vocabSize, addedTokens: SPECIAL, splitRegex, minFrequency: 1 });
  }
  const idOf = (content: string) => (tokenizerJson.added_tokens as { id: number; content: string }[]).find((t) => t.content === content)!.id;

  // 4. random model
  let modelDir = join(work, 'cycle-0');
  await makeRandomModel(modelDir, {
    arch: 'qwen3', seed, hiddenSize: opt('hidden'), numLayers: opt('layers'), numHeads: opt('hidden') / 32, numKvHeads: opt('hidden') / 64, headDim: 32, intermediateSize: opt('intermediate'),
    vocabSize, std: 0.02, embedStd: 0.1, finalNormMean: 2, tokenizer: false,
    bosTokenId: idOf('<|endoftext|>'), eosTokenId: idOf('<|im_end|>'), maxPositionEmbeddings: 2048,
  });
  await writeFile(join(modelDir, 'tokenizer.json'), JSON.stringify(tokenizerJson));
  await writeFile(join(modelDir, 'tokenizer_config.json'), JSON.stringify({
    tokenizer_class: 'Qwen2Tokenizer', add_bos_token: false, add_prefix_space: false, bos_token: null,
    eos_token: '<|im_end|>', pad_token: '<|endoftext|>', unk_token: null, model_max_length: 2048,
    clean_up_tokenization_spaces: false, split_special_tokens: false,
    added_tokens_decoder: Object.fromEntries((tokenizerJson.added_tokens as { id: number }[]).map((t) => [String(t.id), t])),
    chat_template: template,
  }, null, 2));

  // 5. SFT warm-up, merged after each cycle; first, if asked, a phase of copy drills alone
  const threads = values.threads ? Number(values.threads) : undefined;
  const rng = makeRng(seed);
  // open-vocabulary drills draw from streams of their own, so that a recipe without them draws exactly the
  // batches it drew before they existed, and a build given --drilled draws the open tool drills a full one does
  // with a share of their words from the trained model's own word tokens (0: the draws made before that existed)
  const tokenizer = await HfTokenizer.load(values.drilled ?? modelDir);
  const words = opt('vocab-words') > 0 ? wordTokens((id) => tokenizer.decode([id]), vocabSize) : [];
  const vocabulary = (r: ReturnType<typeof makeRng>) => (opt('vocab-words') > 0 ? withVocabulary(r, words, opt('vocab-words')) : r);
  if (words.length) log(`open drills: ${opt('vocab-words')} of their words from the model's ${words.length} word tokens`);
  const openCopyRng = vocabulary(makeRng(seed + 4000));
  const openToolRng = vocabulary(makeRng(seed + 4001));
  const copy = (r: typeof rng) => (opt('open-copy') > 0 && openCopyRng.uniform() < opt('open-copy') ? openCopyDrill(openCopyRng) : copyDrill(r));
  if (values.drilled) {
    modelDir = values.drilled;
  } else if (opt('drill-steps') > 0) {
    const engine = await ChatEngine.load(modelDir, threads ? { threads } : {});
    const trainer = await Trainer.create(engine.model as never, {
      adapterName: 'drills', rank: Number(values.rank), alpha: Number(values.rank), targets: [...LORA_TARGETS],
      seed,
    });
    const drillSchedule: LrSchedule = { kind: 'warmup', warmupSteps: 10 };
    for (let step = 0; step < opt('drill-steps'); step++) {
      const batch = Array.from({ length: 64 }, () => trajectoryToSequences(engine, { messages: copy(rng), tools: [] })).flat();
      const optimizer = { lr: learningRate(drillSchedule, Number(values.lr), step), maxGradNorm: 1 };
      const m = await trainer.sftStep(batch, { foldLora: true, optimizer });
      if (step % 50 === 0) log(`drills step ${step}: loss ${m.loss.toFixed(4)}`);
    }
    const adapterDir = join(work, 'adapter-drills');
    await trainer.save(adapterDir);
    (engine.model as { close(): void }).close();
    const next = join(work, 'drilled');
    await mergeAdapter({ modelDir, adapterDir, out: next, dtype: 'F32', overwrite: true });
    modelDir = next;
  }
  // more copy drills in rounds, on streams of their own (a build given --drilled draws the same ones)
  const moreRng = makeRng(seed + 6);
  const moreOpenRng = vocabulary(makeRng(seed + 7));
  for (let done = 0; done < opt('drill-more'); done += DRILL_ROUND) {
    const engine = await ChatEngine.load(modelDir, threads ? { threads } : {});
    const trainer = await Trainer.create(engine.model as never, {
      adapterName: 'drills', rank: Number(values.rank), alpha: Number(values.rank), targets: [...LORA_TARGETS], seed: seed + 6 + done,
    });
    for (let step = 0; step < Math.min(DRILL_ROUND, opt('drill-more') - done); step++) {
      const more = () => (opt('open-copy') > 0 && moreOpenRng.uniform() < opt('open-copy') ? openCopyDrill(moreOpenRng) : copyDrill(moreRng));
      const batch = Array.from({ length: 64 }, () => trajectoryToSequences(engine, { messages: more(), tools: [] })).flat();
      const optimizer = { lr: learningRate({ kind: 'warmup', warmupSteps: 10 }, Number(values.lr), step), maxGradNorm: 1 };
      const m = await trainer.sftStep(batch, { foldLora: true, optimizer });
      if (step % 50 === 0) log(`more drills step ${done + step}: loss ${m.loss.toFixed(4)}`);
    }
    const adapterDir = join(work, `adapter-more-${done}`);
    await trainer.save(adapterDir);
    (engine.model as { close(): void }).close();
    const next = join(work, `drilled-more-${done + DRILL_ROUND}`);
    await mergeAdapter({ modelDir, adapterDir, out: next, dtype: 'F32', overwrite: true });
    modelDir = next;
  }
  // the warm-up's own random stream, so that a build given --drilled draws exactly the batches a full one does
  const sftRng = makeRng(seed + 2000);
  // a stream of its own, so that `--tool-drills 0` draws exactly the batches the builds before tool drills drew
  const toolRng = makeRng(seed + 3000);
  // copy drills at a tool call's distance from the task, on a stream of their own (0: the batches drawn before them)
  const contextRng = vocabulary(makeRng(seed + 4002));
  const skillCopy = (r: typeof rng) => {
    const messages = copy(r);
    if (!(opt('copy-context') > 0 && contextRng.uniform() < opt('copy-context'))) return { messages, tools: [] };
    return { messages: [{ role: 'system' as const, content: DEFAULT_SYSTEM_PROMPT }, ...messages], tools: openDrill(contextRng).tools };
  };
  const cycles = opt('cycles');
  for (let cycle = 0; cycle < cycles; cycle++) {
    const engine = await ChatEngine.load(modelDir, threads ? { threads } : {});
    const habitCycle = cycle >= cycles - opt('habit-cycles');
    const pool = habitCycle ? mixed : transcripts;
    const sequences: TrainSequence[] = pool.flatMap((t) => trajectoryToSequences(engine, t));
    const trainer = await Trainer.create(engine.model as never, {
      adapterName: 'warmup', rank: Number(values.rank), alpha: Number(values.rank), targets: [...LORA_TARGETS],
      seed: seed + cycle,
    });
    const schedule: LrSchedule = { kind: 'cosine', warmupSteps: 5, totalSteps: opt('steps-per-cycle') };
    for (let step = 0; step < opt('steps-per-cycle'); step++) {
      const batch = Array.from({ length: Number(values['batch-size']) }, () => sequences[Math.floor(sftRng.uniform() * sequences.length)]);
      for (let k = 0; k < Number(values.drills); k++) batch.push(...trajectoryToSequences(engine, skillCopy(sftRng)));
      // the skill cycles only: a drill always looks up and reports, which would undo the habit cycle's mix
      if (!habitCycle) for (let k = 0; k < Number(values['tool-drills']); k++) batch.push(...trajectoryToSequences(engine, toolDrill(toolRng)));
      if (!habitCycle) for (let k = 0; k < opt('open-drills'); k++) batch.push(...trajectoryToSequences(engine, openDrill(openToolRng)));
      const optimizer = { lr: learningRate(schedule, Number(values.lr), step), weightDecay: 0, maxGradNorm: 1 };
      const m = await trainer.sftStep(batch, { foldLora: true, optimizer });
      if (step % 10 === 0 || step === opt('steps-per-cycle') - 1) log(`cycle ${cycle} step ${step}: loss ${m.loss.toFixed(4)} grad ${m.gradNorm.toFixed(3)} ${Math.round(m.tokensPerSecond)} tok/s`);
    }
    const adapterDir = join(work, `adapter-${cycle}`);
    await trainer.save(adapterDir);
    (engine.model as { close(): void }).close();
    const next = join(work, `cycle-${cycle + 1}`);
    await mergeAdapter({ modelDir, adapterDir, out: next, dtype: 'F32', overwrite: true });
    modelDir = next;
    if (values['eval-each-cycle']) await validate(modelDir, sets.val, threads);
  }

  // 6. validation and test success, as `mcprl train` measures them (greedy, checks reward)
  const summary = await validate(modelDir, sets.val, threads);
  const testSummary = await validate(modelDir, sets.test, threads, 'test');

  // 7. the bundled folder: the model, its warm-up manifest (one entry per scenario id: a schema task reads the same
  //    on every catalogue), and the RL / validation scenario sets
  const out = outDir;
  await rm(out, { recursive: true, force: true });
  await cp(modelDir, out, { recursive: true });
  await writeFile(join(out, 'mcprl_warmup.jsonl'), formatScenarios([...new Map([...sets.warmup, ...madeUp, ...synthetic.scenarios].map((s) => [s.id, s])).values()]));
  await writeJsonAtomic(join(out, 'mcprl_build.json'), {
    seed, vocab_size: vocabSize, warmup_transcripts: transcripts.length, warmup_habits: habits,
    digits: values.tokenizer ? undefined : values.digits, warmup_catalogues: opt('warmup-catalogues'), lookup_rate: Number(values['lookup-rate']), report_rate: Number(values['report-rate']), drill_steps: opt('drill-steps'), ...(opt('drill-more') > 0 ? { drill_more: opt('drill-more') } : {}), ...(opt('copy-context') > 0 ? { copy_context_share: opt('copy-context') } : {}), ...(opt('vocab-words') > 0 ? { vocab_words_share: opt('vocab-words'), vocab_words: words.length } : {}), drills_per_batch: Number(values.drills), tool_drills_per_batch: Number(values['tool-drills']),
    ...(opt('open-drills') > 0 || opt('open-copy') > 0 ? { open_drills_per_batch: opt('open-drills'), open_copy_share: opt('open-copy') } : {}),
    cycles, habit_cycles: opt('habit-cycles'), steps_per_cycle: opt('steps-per-cycle'),
    batch_size: Number(values['batch-size']), lr: Number(values.lr), rank: Number(values.rank),
    val_success: summary.success_rate, test_success: testSummary.success_rate,
    ...(values.recipe === 'bookshop' ? {} : {
      recipe: values.recipe, hidden_size: opt('hidden'), layers: opt('layers'), intermediate_size: opt('intermediate'), docs_chars: opt('docs-chars'),
      synthetic_servers: opt('synthetic-servers'), synthetic_per_server: opt('synthetic-per-server'), synthetic_transcripts: synthetic.transcripts.length, synthetic_unsolved: synthetic.unsolved,
    }),
  });
  await mkdir(scenarioDir, { recursive: true });
  await writeFile(join(scenarioDir, 'train.jsonl'), formatScenarios(sets.train));
  await writeFile(join(scenarioDir, 'val.jsonl'), formatScenarios(sets.val));
  await writeFile(join(scenarioDir, 'test.jsonl'), formatScenarios(sets.test));
  log(`wrote ${out} and ${values.scenarios}`);
}

async function validate(modelDir: string, val: Scenario[], threads: number | undefined, set = 'validation') {
  const engine = await ChatEngine.load(modelDir, threads ? { threads } : {});
  const { summary } = await runEval({
    policy: new EnginePolicy(engine, { maxTokens: 160, temperature: 0 }), target: fixtureTarget(), scenarios: val, reward: 'checks',
    rolloutsPerGroup: 1, concurrency: 8, maxTurns: 6, seed,
  });
  (engine.model as { close(): void }).close();
  log(`${modelDir}: ${set} success ${(summary.success_rate * 100).toFixed(1)}% (${summary.successes}/${summary.trajectories}), tool-call validity ${(summary.tool_call_validity_rate * 100).toFixed(1)}%`);
  return summary;
}

await main();
