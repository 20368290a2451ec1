/**
 * The contract of a training job: every setting of a run, with its default and unit, in one zod schema.
 *
 * The `mcprl train` options (src/cli/schema-options.ts) and the start_training tool's input (src/mcp-server) are
 * derived from TrainSettingsSchema; a run's config.json is TrainConfigSchema's output, and `train()` reads nothing
 * else. A field's `.describe()` text is its help text; the default comes from the schema. The command line's
 * options come here as commander read them (numbers as text: trainConfigFromOptions), so that a value is read,
 * bounded and defaulted in one place, this schema's parse.
 */
import { z } from 'zod';
import { DECIMAL } from '../util/decimal.js';
import { McprlError } from '../util/errors.js';
import { DeviceChoiceSchema, DeviceOptionsSchema } from '../engine/device.js';
import { WeightDtypeSchema } from '../engine/weight-dtype.js';
import { PrefixCacheMibSchema } from '../engine/prefix-cache.js';
import { KvCacheMibSchema } from '../engine/kv-cache.js';
import { RolloutSettingsSchema, TRAIN_ROLLOUT_DEFAULTS, withDefault } from '../agent/rollout-settings.js';
import { resolveRewardMode, RewardModeSchema } from '../ruler/blend.js';
import { DEFAULT_CURRICULUM_POWER, DEFAULT_CURRICULUM_RETIRE_AFTER } from './curriculum.js';
import { AdapterSettingsSchema, StepSettingsSchema } from './step-settings.js';

export { PolicyLossSchema, type PolicyLoss } from './step-settings.js';

// The library's fields (src/train/step-settings.ts), with their defaults and help texts, which the job extends.
const step = StepSettingsSchema.shape;
const adapter = AdapterSettingsSchema.shape;

/** The settings a user chooses (every one optional, with the default given here or in the library's schemas). */
export const TrainSettingsSchema = z.object({
  /** Attempts per scenario; they form one group. Default 4. */
  rolloutsPerGroup: z.number().int().min(2).default(4).describe('attempts per scenario (one group)'),
  /** Scenarios (groups) gathered per step. Default 8. */
  groupsPerStep: z.number().int().min(1).default(8).describe('scenarios per step'),
  /** Optimiser steps per gathered batch (the library's `updates`). Default 1. */
  updatesPerStep: step.updates,
  /** AdamW peak learning rate, per optimiser step (the library's). Default 5e-4. */
  lr: step.lr,
  /** Learning-rate schedule over the run's optimiser steps: constant, or cosine decay to 0 at maxSteps × updatesPerStep. Default constant. */
  lrSchedule: z.enum(['constant', 'cosine']).default('constant').describe('learning-rate schedule: constant, or cosine decay to 0 at the last step'),
  /** Optimiser steps of linear learning-rate warm-up before the schedule. Default 0. */
  warmupSteps: z.number().int().nonnegative().default(0).describe('optimiser steps of linear learning-rate warm-up'),
  /** LoRA rank, alpha and target modules (the library's adapter settings). Defaults 16, 32, all seven projections. */
  rank: adapter.rank,
  alpha: adapter.alpha,
  targets: adapter.targets,
  /** The policy loss and its KL coefficient β (the library's). Defaults grpo, 0. */
  loss: step.loss,
  beta: step.beta,
  /** Training steps at most; 0 checks the scenario set and measures step 0 (validation, test) without training. Default 20. */
  maxSteps: z.number().int().nonnegative().default(20).describe('training steps at most (0: check the set and measure step 0 only)'),
  /** Validate every this many steps (and after the last). Default 2. */
  evalEvery: z.number().int().positive().default(2).describe('validate every N steps'),
  /** Stop after this many validations without improvement. Default 3. */
  patience: z.number().int().positive().default(3).describe('stop after N validations without improvement'),
  /**
   * Consecutive steps that train nothing because every rollout was lost to an infrastructure failure (the judge
   * down, so every group unscored; or every rollout errored) before the run stops with an error. Default 3.
   */
  maxUntrainedSteps: z.number().int().positive().default(3).describe('stop with an error after N consecutive steps whose every rollout was lost to infrastructure failures'),
  /** Seed of the scenario order, sampling and the adapter's initial weights (the library's adapter seed). Default 1. */
  seed: adapter.seed,
  /**
   * How each step's scenarios are drawn: `shuffle`, a seeded shuffle of the training set per epoch; or
   * `pass_rate`, weighted by recent pass rate towards those the model sometimes solves (src/train/curriculum.ts).
   * Default shuffle.
   */
  curriculum: z.enum(['shuffle', 'pass_rate']).default('shuffle').describe('how scenarios are drawn: shuffle, or pass_rate (towards those sometimes solved)'),
  /**
   * Exponent k of the `pass_rate` curriculum's weight, floor + (p (1 − p))^k: a larger k draws the scenarios solved
   * about half the time more often against those always solved or always failed (with the floor, a scenario at
   * p = 0.9 weighs 0.19 of one at p = ½ at k = 2, and 0.37 at k = 1). Default 1 (DEFAULT_CURRICULUM_POWER).
   */
  curriculumPower: z.number().positive().default(DEFAULT_CURRICULUM_POWER).describe('pass_rate curriculum: exponent k of its weight floor + (p(1-p))^k; larger draws fewer scenarios always solved or failed'),
  /**
   * The `pass_rate` curriculum retires a scenario whose last N groups each scored all alike (every attempt the same
   * reward: no GRPO signal), or whose last group was solved by every attempt: it weighs only the floor until a draw
   * of it gives a group whose scores differ. A full group all alike is stronger evidence than the smoothed pass
   * rate, and catches groups all at the same partial reward, which a pass rate cannot see. 0 never retires.
   * Default 0 (DEFAULT_CURRICULUM_RETIRE_AFTER).
   */
  curriculumRetireAfter: z.number().int().nonnegative().default(DEFAULT_CURRICULUM_RETIRE_AFTER).describe('pass_rate curriculum: retire a scenario (draw it only at the weight floor) after N groups in a row whose attempts all scored alike, or one all solved (0: never)'),
  /**
   * Dynamic sampling (DAPO): rounds of extra rollouts per step in which each group whose rewards were all alike
   * (no signal, dropped) is replaced by a group of another scenario, so that the step trains on a full batch.
   * 0 turns it off: such groups are only dropped. Default 0.
   */
  resampleRounds: z.number().int().nonnegative().default(0).describe('dynamic sampling: rounds that replace groups without reward variance by other scenarios (0: off)'),
  /** Sampling temperature of training rollouts. Default 1 (TRAIN_ROLLOUT_DEFAULTS). */
  temperature: RolloutSettingsSchema.shape.temperature.default(TRAIN_ROLLOUT_DEFAULTS.temperature).describe('sampling temperature of training rollouts'),
  /**
   * Compute the training (and old) log-probabilities at the sampling temperature (logits ÷ temperature, as TRL
   * and verl do), so that the policy optimised is the one that sampled. Default false: at temperature 1.
   */
  trainAtSamplingTemperature: z.boolean().default(false).describe('compute training logprobs from logits ÷ the sampling temperature'),
  /**
   * Decode training rollouts' tool calls constrained to the tools' schemas (src/chat/constrain.ts): every call
   * is well-formed, and which tool and values stay the model's choice. With trainAtSamplingTemperature, the
   * trainer renormalises log π over the same allowed tokens. Default false.
   */
  constrainToolCalls: z.boolean().default(false).describe("decode rollouts' tool calls constrained to the tools' schemas"),
  /**
   * Truncated importance sampling for rollouts sampled on rollout servers (`--rollout-url`): the cap on each
   * token's weight π_trainer / π_sampler (a ratio; src/train/off-policy.ts). 0 turns the weighting off (the
   * mismatch is still measured). Not used by in-process rollouts, whose sampler is the trainer. Default 2.
   */
  tisCap: z.number().nonnegative().default(2).describe('truncated importance sampling cap on pi_trainer/pi_sampler for rollouts on --rollout-url servers (0: off)'),
  /**
   * Asynchronous rollouts on rollout servers (`--rollout-url`): with N ≥ 1 the next steps' groups are gathered while
   * the current step trains, on whatever adapter the servers serve then, at most N steps older than the adapter that
   * trains on them (a group sampled by an older one is discarded and gathered again); their logprobs are corrected
   * by truncated importance sampling (`tisCap`). Such runs are not bit-reproducible: timing decides which adapter
   * samples what. Needs rollout servers: in-process, the engine cannot generate while it trains. Default 0:
   * synchronous, each step gathers on the adapter it trains (in steps).
   */
  maxStaleness: z.number().int().nonnegative().default(0).describe('with --rollout-url: gather the next steps while this one trains, on adapters at most N steps old (0: synchronous)'),
  /** Sampling temperature of validation rollouts; greedy, so that validation success is a property of the weights. Default 0 (TRAIN_ROLLOUT_DEFAULTS). */
  valTemperature: RolloutSettingsSchema.shape.temperature.default(TRAIN_ROLLOUT_DEFAULTS.valTemperature).describe('sampling temperature of validation rollouts'),
  /** Attempts per validation scenario. Default 1. */
  valRollouts: z.number().int().positive().default(1).describe('attempts per validation scenario'),
  /** Assistant turns per rollout, at most. Default 6 (TRAIN_ROLLOUT_DEFAULTS). */
  maxTurns: withDefault(RolloutSettingsSchema.shape.maxTurns, TRAIN_ROLLOUT_DEFAULTS.maxTurns),
  /** Tokens per assistant turn, at most. Default 256 (TRAIN_ROLLOUT_DEFAULTS). */
  maxTokens: withDefault(RolloutSettingsSchema.shape.maxTokens, TRAIN_ROLLOUT_DEFAULTS.maxTokens),
  /**
   * Chat template variables for every rendering of a prompt, in rollouts and in training tokenisation alike (so
   * the trained tokens are the sampled ones), e.g. `{ enable_thinking: false }` for Qwen3. Default none: the
   * template's own defaults.
   */
  chatTemplateKwargs: z.record(z.string(), z.unknown()).optional().describe('chat template variables as a JSON object, e.g. \'{"enable_thinking": false}\''),
  /** Where the engine runs: cpu, cuda or auto (src/engine/device.ts). Default auto. */
  device: DeviceOptionsSchema.shape.device,
  /** How the base model's weights are kept in memory on CPU (src/engine/weight-dtype.ts). Default auto. */
  weightDtype: WeightDtypeSchema.unwrap().optional().describe('how base weights are kept in memory: auto (bf16/f16 stay 16-bit), f32 (widened), bf16 (default: auto)'),
  /**
   * The engine's prefix cache budget in MiB (src/engine/prefix-cache.ts): rollouts that share a prompt's start
   * prefill it once. 0 turns it off; results are the same either way. Default 1024.
   */
  prefixCacheMib: PrefixCacheMibSchema.unwrap().optional().describe(`the engine's prefix cache budget in MiB, 0 off; results are the same either way (default: ${PrefixCacheMibSchema.parse(undefined)})`),
  /**
   * The engine's KV cache budget in MiB (src/engine/kv-cache.ts): rollouts' caches and the prefix cache together;
   * a rollout's turn waits for room beyond it. Default: half the memory available when the model loads, less the
   * weights (the other half is the training step's activations and the rest of the machine's).
   */
  kvCacheMib: KvCacheMibSchema.optional().describe('the engine\'s KV cache budget in MiB (rollouts\' caches and the prefix cache); turns wait for room beyond it (default: half the memory available less the weights)'),
  /** Rollouts in flight at once. Default 8 (TRAIN_ROLLOUT_DEFAULTS). */
  concurrency: withDefault(RolloutSettingsSchema.shape.concurrency, TRAIN_ROLLOUT_DEFAULTS.concurrency),
  /** How attempts are scored (see resolveRewardMode). Default blend with a judge, checks without. */
  reward: RewardModeSchema.optional().describe('how attempts are scored (default: blend with a judge, checks without)'),
});
export type TrainSettings = z.input<typeof TrainSettingsSchema>;

/** The run's configuration, as written to config.json (no secrets: the judge is described, its key is not). */
export const TrainConfigSchema = TrainSettingsSchema.extend({
  /** The base model: a Hugging Face model folder (an absolute path). */
  model: z.string(),
  /** A description of the target (command or URL; header and environment values are never stored). */
  target: z.string(),
  /** How attempts are scored, decided when the run was created. */
  reward: RewardModeSchema,
  /**
   * The RULER judge (its API key stays in an environment variable). Default none. `timeoutMs`: one request;
   * `retryBudgetMs`: one group's attempts and waits together (defaults in src/ruler).
   */
  judge: z.object({ baseURL: z.string(), model: z.string(), timeoutMs: z.number().int().positive().optional(), retryBudgetMs: z.number().int().positive().optional() }).optional(),
  /**
   * Where the engine ran when the run was created: `device` resolved, and why (src/engine/device.ts). Written by the
   * job; a resumed run resolves `device` again, and its first progress line says where it runs.
   */
  deviceChoice: DeviceChoiceSchema.optional(),
});
export type TrainConfig = z.infer<typeof TrainConfigSchema>;

/** What a job trains, besides its settings. */
export interface TrainJobIdentity {
  model: string;
  target: string;
  judge?: NonNullable<TrainConfig['judge']>;
}

/**
 * A run's configuration from the user's settings: defaults filled in, the reward mode decided (`howToAddJudge`
 * finishes the message when a judge is missing, in the caller's words). Every way of starting a run comes here.
 */
export function trainConfigFrom(settings: TrainSettings, identity: TrainJobIdentity, howToAddJudge?: string): TrainConfig {
  return configFrom(TrainConfigSchema, settings, identity, howToAddJudge);
}

/**
 * trainConfigFrom for a command line's options as commander read them: every settings field (keys other than
 * settings are dropped), its numbers as decimal text. A bad value is refused naming it as `nameOf` does (a flag).
 */
export function trainConfigFromOptions(options: Readonly<Record<string, unknown>>, identity: TrainJobIdentity, howToAddJudge: string, nameOf: (key: string) => string): TrainConfig {
  return configFrom(TrainConfigTextSchema, options, identity, howToAddJudge, nameOf);
}

/**
 * The settings a command line gives (numbers as text), each read and checked by its field, none filled in: what a
 * resumed run compares with its own. A bad value is refused naming it as `nameOf` does.
 */
export function givenTrainSettings(options: Readonly<Record<string, unknown>>, nameOf: (key: string) => string): Partial<TrainConfig> {
  const given: Record<string, unknown> = {};
  for (const key of Object.keys(TrainSettingsSchema.shape).filter((k) => options[k] !== undefined)) {
    const parsed = TrainConfigTextSchema.shape[key].safeParse(options[key], { reportInput: true });
    if (!parsed.success) throw settingError({ ...parsed.error.issues[0], path: [key, ...parsed.error.issues[0].path] }, nameOf);
    given[key] = parsed.data;
  }
  return given as Partial<TrainConfig>;
}

function configFrom(schema: z.ZodObject, settings: Readonly<Record<string, unknown>>, identity: TrainJobIdentity, howToAddJudge?: string, nameOf?: (key: string) => string): TrainConfig {
  const reward = resolveRewardMode(settings.reward as TrainSettings['reward'], identity.judge !== undefined, howToAddJudge);
  const parsed = schema.safeParse({ ...settings, ...identity, reward }, { reportInput: true });
  if (!parsed.success) throw settingError(parsed.error.issues[0], nameOf);
  return parsed.data as TrainConfig;
}

/** The error of a setting's first issue: named as `nameOf` names it (with the value given) or by its path. */
function settingError(issue: z.core.$ZodIssue, nameOf?: (key: string) => string): McprlError {
  const key = String(issue.path[0] ?? '');
  if (!nameOf || !(key in TrainSettingsSchema.shape)) return new McprlError('TRAIN_INVALID_CONFIG', `training setting ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  const given = typeof issue.input === 'string' ? ` ${JSON.stringify(issue.input)}` : typeof issue.input === 'number' ? ` ${issue.input}` : '';
  return new McprlError('TRAIN_INVALID_CONFIG', `${nameOf(key)}${given}: ${issue.message}`);
}

/**
 * A numeric setting given as text (a command line's): decimal notation only, read into the number the field then
 * checks; anything else is refused here, since Number() would take '' or '0x10'.
 */
function fromText(field: z.ZodType): z.ZodType {
  return z.preprocess((value, ctx) => {
    if (typeof value !== 'string') return value;
    if (DECIMAL.test(value.trim())) return Number(value);
    ctx.addIssue({ code: 'custom', message: 'expected a number', input: value });
    return z.NEVER;
  }, field);
}

const numericKeys = Object.entries((z.toJSONSchema(TrainSettingsSchema, { io: 'input' }) as { properties: Record<string, { type?: string }> }).properties)
  .filter(([, f]) => f.type === 'number' || f.type === 'integer')
  .map(([k]) => k);

/** TrainConfigSchema reading its numeric settings from decimal text too (trainConfigFromOptions). */
const TrainConfigTextSchema: z.ZodObject = TrainConfigSchema.extend(
  Object.fromEntries(numericKeys.map((k) => [k, fromText(TrainConfigSchema.shape[k as keyof typeof TrainConfigSchema.shape])])),
);

/** A run's config.json, read back (an old or hand-edited file is checked like a new one). */
export function parseTrainConfig(raw: unknown, where: string): TrainConfig {
  const parsed = TrainConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new McprlError('TRAIN_INVALID_CONFIG', `${where}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return parsed.data;
}
