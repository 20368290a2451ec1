/**
 * `mcprl eval <target> --scenarios DIR --model-base-url URL --model NAME` (a served model) or `--model DIR|HUB_ID
 * [--adapter DIR]` (a Hugging Face folder or hub id run in-process, as `mcprl mcp`'s evaluate does): run an agent on
 * scenarios, score the attempts (checks, RULER, or a blend) and report; trajectories.jsonl and summary.json go to --out.
 */
import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { EvalOutputDir, formatEvalSummary, runEval, summarizeEval } from '../eval/evaluate.js';
import { EnginePolicy } from '../agent/engine-policy.js';
import { OpenAIPolicy, type Policy } from '../agent/policy.js';
import { ChatEngine } from '../chat/chat-engine.js';
import { chooseDevice, describeDevice, DeviceOptionsSchema, type Device } from '../engine/device.js';
import { EVAL_ROLLOUT_DEFAULTS, RolloutSettingsSchema } from '../agent/rollout-settings.js';
import { McpConnectError, refusedWrites, SandboxError } from '../mcp/index.js';
import { resolveRewardMode, RewardModeSchema, type RewardMode } from '../ruler/blend.js';
import { DEFAULT_JUDGE_TIMEOUT_MS, OpenAIJudge } from '../ruler/judge.js';
import { DEFAULT_JUDGE_RETRY_BUDGET_MS } from '../ruler/ruler.js';
import { checkUniqueIds, loadScenarioSet, readScenarios, type Scenario } from '../scenarios/scenario.js';
import { modelFolder, MODEL_OPTION_HELP } from './model-option.js';
import { numberParser } from './parse-number.js';
import { addSchemaOptions } from './schema-options.js';
import { addTargetOptions, connectOptionsFromCli, isolationFromCli, policyFromCli, targetFromCli, type TargetCliOptions } from './target-options.js';

interface EvalCliOptions extends TargetCliOptions {
  device?: Device;
  scenarios: string;
  split: 'train' | 'val' | 'test' | 'all';
  limit?: number;
  modelBaseUrl?: string;
  model: string;
  adapter?: string;
  chatTemplateKwargs?: Record<string, unknown>;
  modelApiKeyEnv: string;
  judgeBaseUrl?: string;
  judgeModel?: string;
  judgeApiKeyEnv: string;
  judgeTimeout?: number;
  judgeRetryBudget?: number;
  reward?: RewardMode;
  rulerWeight: number;
  rubricFile?: string;
  judgeCache?: string;
  rollouts?: number;
  concurrency: number;
  maxTurns: number;
  maxTokens?: number;
  temperature?: number;
  seed?: number;
  systemPromptFile?: string;
  callTimeout?: number;
  rolloutTimeout?: number;
  out?: string;
  resume?: boolean;
  json?: boolean;
}

const positiveInt = (unit?: string) => numberParser({ integer: true, above: 0, unit });
/** The rollout settings' fields, whose descriptions are these options' help. */
const rolloutFields = RolloutSettingsSchema.shape;

/** A scenario set folder (train.jsonl + val.jsonl [+ test.jsonl], see `mcprl scenarios`) or a single .jsonl file. */
async function loadScenarios(where: string, split: EvalCliOptions['split']): Promise<Scenario[]> {
  if ((await stat(where)).isFile()) return readScenarios(where);
  const set = await loadScenarioSet(where);
  if (split === 'train') return set.train;
  if (split === 'val') return set.val;
  if (split === 'test') return set.test;
  const all = [...set.train, ...set.val, ...set.test];
  checkUniqueIds(all);
  return all;
}

function jsonObject(text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    v = undefined;
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new InvalidArgumentError('expected a JSON object');
  return v as Record<string, unknown>;
}

function apiKey(envName: string): string | undefined {
  const v = process.env[envName];
  return v && v.trim() !== '' ? v : undefined;
}

export function registerEval(program: Command): Command {
  const cmd = program
    .command('eval')
    .description('run an agent on scenarios against an MCP server, score the attempts, and report')
    .argument('[target...]', 'an http(s) URL, or the server command after --')
    .requiredOption('--scenarios <path>', 'scenario set folder (train.jsonl + val.jsonl) or one .jsonl file')
    .addOption(new Option('--split <split>', 'which scenarios of a set folder to run').choices(['train', 'val', 'test', 'all']).default('all'))
    .option('--limit <n>', 'only the first N scenarios', positiveInt('scenarios'))
    .option('--model-base-url <url>', 'OpenAI-compatible endpoint of the policy, e.g. http://localhost:8000/v1 (default: run --model in-process)')
    .requiredOption('--model <name|dir|hub-id>', `model name at --model-base-url, or without it ${MODEL_OPTION_HELP}, run in-process`)
    .option('--adapter <dir>', 'in-process only: a PEFT LoRA adapter folder (a run checkpoint, `mcprl export`) applied to --model')
    .option('--chat-template-kwargs <json>', 'chat template variables for every turn, e.g. \'{"enable_thinking": false}\' (sent as chat_template_kwargs to a served model)', jsonObject)
    .option('--model-api-key-env <var>', 'environment variable holding the policy API key', 'OPENAI_API_KEY')
    .option('--judge-base-url <url>', 'OpenAI-compatible endpoint of the RULER judge')
    .option('--judge-model <name>', 'judge model name')
    .option('--judge-api-key-env <var>', 'environment variable holding the judge API key', 'OPENAI_API_KEY')
    .option('--judge-timeout <ms>', `timeout of one judge request (default ${DEFAULT_JUDGE_TIMEOUT_MS})`, positiveInt('milliseconds'))
    .option('--judge-retry-budget <ms>', `time one group may spend on the judge, retries and Retry-After waits included (default ${DEFAULT_JUDGE_RETRY_BUDGET_MS})`, positiveInt('milliseconds'))
    .addOption(new Option('--reward <mode>', 'reward: ruler, checks, or blend (default: blend with a judge, checks without)').choices(RewardModeSchema.options))
    .option('--ruler-weight <w>', 'weight of RULER in blend (checks get the rest)', numberParser({ min: 0, max: 1 }), 0.5)
    .option('--rubric-file <file>', "replaces RULER's default rubric")
    .option('--judge-cache <dir>', 'cache folder for judge answers (default: <out>/judge-cache)')
    .option('--rollouts <k>', 'attempts per scenario (default 4 with a judge, 1 without)', positiveInt('rollouts'))
    .option('--concurrency <c>', rolloutFields.concurrency.description!, positiveInt(), EVAL_ROLLOUT_DEFAULTS.concurrency)
    .option('--max-turns <n>', rolloutFields.maxTurns.description!, positiveInt('turns'), EVAL_ROLLOUT_DEFAULTS.maxTurns)
    .option('--max-tokens <n>', `${rolloutFields.maxTokens.description!}, at most (default: the endpoint's own limit)`, positiveInt('tokens'))
    .option('--temperature <t>', rolloutFields.temperature.description!, numberParser({ min: 0 }))
    .option('--seed <s>', 'base sampling seed (rollout k gets seed + k)', numberParser({ integer: true, min: 0 }))
    .option('--system-prompt-file <file>', 'replaces the default agent system prompt')
    .option('--call-timeout <ms>', 'timeout of one tool call', positiveInt('milliseconds'))
    .option('--rollout-timeout <ms>', 'timeout of one whole rollout', positiveInt('milliseconds'))
    .option('--out <dir>', 'output folder (default runs/eval-<timestamp>)')
    .option('--resume', 'finish the eval in --out: scenarios whose groups it already holds are skipped')
    .option('--json', 'print the summary as JSON');
  addSchemaOptions(cmd, DeviceOptionsSchema);
  addTargetOptions(cmd);
  cmd.addHelpText(
    'after',
    `
Examples:
  mcprl eval --scenarios runs/bookshop/scenarios --model-base-url http://localhost:8000/v1 --model qwen3 \\
    -- node --import tsx fixtures/server/main.ts
  mcprl eval --scenarios runs/bookshop/scenarios --model fixtures/models/tiny-bookshop --adapter runs/bookshop/adapter \\
    -- node --import tsx fixtures/server/main.ts
  mcprl eval https://example.com/mcp --scenarios scen/ --model-base-url https://api.openai.com/v1 --model gpt-4.1-mini \\
    --judge-base-url https://api.openai.com/v1 --judge-model o4-mini --rollouts 4 --reward blend`,
  );
  cmd.action((targetArgs: string[], opts: EvalCliOptions) => evalCommand(targetArgs, opts));
  return cmd;
}

/** The eval command's action: its inputs checked, the rollouts run and written, the summary reported. */
async function evalCommand(targetArgs: string[], opts: EvalCliOptions): Promise<void> {
  try {
    const { target, hasJudge, reward, model, scenarios, isolation } = await evalInputs(targetArgs, opts);
    if (opts.resume && opts.out === undefined) throw new InvalidArgumentError('--resume needs --out DIR (the eval to finish)');
    const out = opts.out ?? path.join('runs', `eval-${new Date().toISOString().replace(/[:.]/g, '-')}`);
    const rolloutsPerGroup = opts.rollouts ?? (hasJudge ? 4 : 1);
    const { out: output, finished } = await EvalOutputDir.open(out, { resume: opts.resume ?? false, rolloutsPerGroup });
    const todo = scenarios.filter((s) => !finished.has(s.id));
    if (opts.resume) process.stderr.write(`mcprl eval: resuming ${out}: ${scenarios.length - todo.length} of ${scenarios.length} scenarios already finished\n`);
    // SIGINT/SIGTERM: rollouts in flight are cut short, and what finished is summarised before exiting non-zero.
    const stop = new AbortController();
    let interrupted: NodeJS.Signals | undefined;
    const onSignal = (sig: NodeJS.Signals) => {
      interrupted ??= sig;
      stop.abort(new Error(`interrupted by ${sig}`));
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    const { engine, policy } = await evalPolicy(model, opts);
    const judge = hasJudge
      ? new OpenAIJudge({ baseURL: opts.judgeBaseUrl!, model: opts.judgeModel!, apiKey: apiKey(opts.judgeApiKeyEnv), timeoutMs: opts.judgeTimeout })
      : undefined;

    const done = new Map(finished);
    const { summary: run } = await runEval({
      policy,
      target,
      scenarios: todo,
      reward,
      judge,
      rubric: opts.rubricFile ? await readFile(opts.rubricFile, 'utf8') : undefined,
      rulerWeight: opts.rulerWeight,
      judgeCacheDir: judge ? (opts.judgeCache ?? path.join(out, 'judge-cache')) : undefined,
      rolloutsPerGroup,
      judgeRetryBudgetMs: opts.judgeRetryBudget,
      connectTimeoutMs: opts.timeout,
      signal: stop.signal,
      onGroupDone: async (group, i) => {
        done.set(todo[i].id, group);
        await output.append(group);
      },
      concurrency: opts.concurrency,
      ...isolation,
      policyForSafety: policyFromCli(opts),
      systemPrompt: opts.systemPromptFile ? await readFile(opts.systemPromptFile, 'utf8') : undefined,
      maxTurns: opts.maxTurns,
      callTimeoutMs: opts.callTimeout,
      rolloutTimeoutMs: opts.rolloutTimeout,
      seed: opts.seed,
      onTrajectory: opts.json
        ? undefined
        : (t, done, total) => {
            const checks = t.metrics.checks_total ? ` checks ${t.metrics.checks_passed}/${t.metrics.checks_total}` : '';
            const state = t.error ? `error: ${t.error}` : t.metrics.completed ? 'completed' : 'unfinished';
            process.stderr.write(`[${done}/${total}] ${t.id}: ${state}, ${t.metrics.turns} turns${checks}\n`);
          },
    }).finally(() => engine?.close());
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    // The summary covers every finished scenario, this run's and (with --resume) the earlier ones, in order.
    const ids = scenarios.map((s) => s.id).filter((id) => done.has(id));
    const groups = ids.map((id) => done.get(id)!);
    const summary = summarizeEval(groups, ids, { model: run.model, reward, judged: hasJudge && reward !== 'checks', rolloutsPerGroup, durationMs: run.duration_ms });
    if (interrupted) Object.assign(summary, { interrupted, scenarios_requested: scenarios.length });
    await output.writeSummary(summary);
    const files = { trajectories: output.trajectories, summary: output.summary };
    if (opts.json) {
      process.stdout.write(`${JSON.stringify({ ...summary, files }, null, 2)}\n`);
    } else {
      process.stdout.write(`${formatEvalSummary(summary)}\n  wrote ${files.trajectories} and ${files.summary}\n`);
    }
    if (interrupted) {
      process.stderr.write(`mcprl eval: interrupted by ${interrupted}; ${ids.length} of ${scenarios.length} scenarios finished and were written; rerun with --resume --out ${out} for the rest\n`);
      process.exitCode = interrupted === 'SIGINT' ? 130 : 143;
    } else if (summary.rollout_errors === summary.trajectories) {
      const first = groups.flat().find((t) => t.error)?.error ?? 'unknown error';
      process.stderr.write(`mcprl eval: every rollout failed; the first: ${first}\n`);
      process.exitCode = 1;
    }
  } catch (err) {
    const kind = err instanceof McpConnectError ? `${err.code}: ` : '';
    const msg = (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim();
    process.stderr.write(`mcprl eval: ${kind}${msg}\n`);
    process.exitCode = 1;
  }
}

/** The eval's inputs, each checked with a line naming the option at fault, before any output folder or model load. */
async function evalInputs(targetArgs: string[], opts: EvalCliOptions) {
  const target = targetFromCli(targetArgs, opts);
  const hasJudge = opts.judgeBaseUrl !== undefined || opts.judgeModel !== undefined;
  if (hasJudge && (!opts.judgeBaseUrl || !opts.judgeModel)) {
    throw new InvalidArgumentError('give both --judge-base-url and --judge-model');
  }
  const reward = resolveRewardMode(opts.reward, hasJudge, 'add --judge-base-url and --judge-model');
  const inProcess = opts.modelBaseUrl === undefined;
  if (!inProcess && opts.adapter !== undefined) throw new InvalidArgumentError('--adapter applies to an in-process --model; a served model names its adapter in --model');
  if (!inProcess && opts.device !== undefined) throw new InvalidArgumentError('--device applies to an in-process --model; a served model runs where its server runs');
  const model = inProcess ? await modelFolder(opts.model, 'mcprl eval') : undefined;
  if (model && !existsSync(path.join(model.dir, 'config.json'))) {
    throw new InvalidArgumentError(`--model ${opts.model}: not a Hugging Face model folder (no config.json); give --model-base-url to evaluate a served model`);
  }
  // A device that cannot run is refused before the model loads or the output folder exists, naming what is missing.
  const device = model ? chooseDevice(opts.device, { modelDir: model.dir }) : undefined;
  if (device) process.stderr.write(`mcprl eval: ${describeDevice(device)}\n`);
  if (opts.adapter !== undefined && !existsSync(path.join(opts.adapter, 'adapter_config.json'))) {
    throw new InvalidArgumentError(`--adapter ${opts.adapter}: not a PEFT adapter folder (no adapter_config.json)`);
  }
  let scenarios = await loadScenarios(opts.scenarios, opts.split);
  if (opts.limit !== undefined) scenarios = scenarios.slice(0, opts.limit);
  if (scenarios.length === 0) throw new InvalidArgumentError(`no scenarios in ${opts.scenarios} (split ${opts.split})`);
  if (opts.isolate && target.kind !== 'stdio') {
    process.stderr.write('mcprl eval: --isolate only applies to stdio targets; HTTP rollouts share the one server\n');
  }
  // The write tools the safety policy will refuse, and the change that makes them run, in one line before any rollout.
  const isolation = isolationFromCli(opts);
  const refused = await refusedWrites(target, isolation, connectOptionsFromCli(opts)).catch((err: unknown) => {
    // A target that cannot be reached now is each rollout's failure to record; a wrong sandbox is the command's.
    if (err instanceof SandboxError) throw err;
    return undefined;
  });
  if (refused) process.stderr.write(`mcprl eval: ${refused}\n`);
  return { target, hasJudge, reward, model, scenarios, isolation };
}

/** The policy: the model in-process (the engine answers the rollout loop directly) or a served model over HTTP. */
async function evalPolicy(model: Awaited<ReturnType<typeof modelFolder>> | undefined, opts: EvalCliOptions): Promise<{ engine?: ChatEngine; policy: Policy }> {
  // As `mcprl mcp`'s evaluate runs it. The policy samples as --temperature and --max-tokens say (else the engine's or
  // the endpoint's own).
  const sampling = { ...(opts.temperature !== undefined ? { temperature: opts.temperature } : {}), ...(opts.maxTokens !== undefined ? { maxTokens: opts.maxTokens } : {}) };
  const engine = model
    ? await ChatEngine.load(model.dir, { modelName: model.name, ...(opts.adapter !== undefined ? { adapters: [{ name: 'agent', dir: opts.adapter }] } : {}), ...(opts.device !== undefined ? { device: opts.device } : {}) })
    : undefined;
  const policy: Policy = engine
    ? new EnginePolicy(engine, { model: opts.adapter !== undefined ? 'agent' : engine.modelName, ...sampling, ...(opts.chatTemplateKwargs ? { chatTemplateKwargs: opts.chatTemplateKwargs } : {}) })
    : new OpenAIPolicy({
        baseURL: opts.modelBaseUrl!, model: opts.model, apiKey: apiKey(opts.modelApiKeyEnv), ...sampling,
        ...(opts.chatTemplateKwargs ? { extraBody: { chat_template_kwargs: opts.chatTemplateKwargs } } : {}),
      });
  return { engine, policy };
}
