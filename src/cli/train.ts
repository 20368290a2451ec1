/**
 * `mcprl train <target> --model DIR|HUB_ID`: GRPO on a LoRA adapter with the in-process engine (see src/mcp-rl/train.ts).
 */
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { InvalidArgumentError, type Command } from 'commander';
import { chooseDevice, type Device } from '../engine/device.js';
import { describeTarget, McpConnectError } from '../mcp/index.js';
import { DEFAULT_JUDGE_TIMEOUT_MS } from '../ruler/judge.js';
import { DEFAULT_JUDGE_RETRY_BUDGET_MS } from '../ruler/ruler.js';
import { DEFAULT_GENERATOR_TIMEOUT_MS } from '../scenarios/llm.js';
import { givenTrainSettings, parseTrainConfig, trainConfigFromOptions, TrainSettingsSchema, type TrainConfig } from '../train/config.js';
import type { TrainJob } from '../mcp-rl/job.js';
import { runTrainJob, type TrainJobResult } from '../mcp-rl/train.js';
import { ProgressLog } from '../train/progress-log.js';
import { RolloutPoolSettingsSchema, type RolloutPoolSettings } from '../train/rollout-pool.js';
import { RunDir } from '../train/run-dir.js';
import type { DirLock } from '../util/dir-lock.js';
import { terminalBars } from '../util/progress.js';
import { startOtlpTracing } from '../util/tracing.js';
import { numberParser } from './parse-number.js';
import { formatSummary } from './scenarios.js';
import { addSchemaOptions, kebabCase, valuesFromOptions } from './schema-options.js';
import { addTargetOptions, isolationFromCli, policyFromCli, targetFromCli, type TargetCliOptions } from './target-options.js';
import { isSnapshotOf } from '../hf/hub-cache.js';
import { modelFolder, MODEL_OPTION_HELP } from './model-option.js';

/** The options besides the training settings (those are TrainSettingsSchema's fields, see schema-options.ts, as text). */
interface TrainCliOptions extends TargetCliOptions {
  model?: string;
  device?: Device;
  scenarios?: string;
  offline?: boolean;
  count: number;
  generatorBaseUrl?: string;
  generatorModel?: string;
  generatorApiKeyEnv: string;
  generatorTimeout?: number;
  judgeBaseUrl?: string;
  judgeModel?: string;
  judgeApiKeyEnv: string;
  judgeTimeout?: number;
  judgeRetryBudget?: number;
  run?: string;
  runsDir: string;
  resume?: boolean;
  quiet?: boolean;
  json?: boolean;
  rolloutUrl?: string[];
  rolloutApiKeyEnv?: string;
  adapterDir?: string;
  rolloutConcurrency?: number;
  validateInProcess?: boolean;
  otlpEndpoint?: string;
}

/** The flag of a training setting, which names it in errors: `rolloutsPerGroup` → `--rollouts-per-group`. */
const flagOf = (key: string): string => `--${kebabCase(key)}`;

/**
 * A resumed run keeps the settings of its config.json. Options given again with the same value are fine (a
 * repeated command line); a different value is refused rather than silently ignored.
 */
function checkResumeOptions(o: TrainCliOptions, config: TrainConfig, runDir: string): void {
  const show = (v: unknown) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? JSON.stringify(v) : String(v));
  const differs: string[] = [];
  for (const [key, value] of Object.entries(givenTrainSettings(valuesFromOptions(TrainSettingsSchema, o as unknown as Record<string, unknown>), flagOf))) {
    // Where the engine runs is this machine's, not the run's: a resumed run may move to a GPU and back.
    if (key === 'device') continue;
    const stored = config[key as keyof TrainConfig];
    if (!isDeepStrictEqual(value, stored)) differs.push(`${flagOf(key)} ${show(value)} (the run has ${show(stored)})`);
  }
  if (o.model !== undefined && path.resolve(o.model) !== config.model && !isSnapshotOf(o.model, config.model)) differs.push(`--model ${o.model} (the run has ${config.model})`);
  if (o.judgeBaseUrl !== undefined && o.judgeBaseUrl !== config.judge?.baseURL) differs.push(`--judge-base-url ${o.judgeBaseUrl}`);
  if (o.judgeModel !== undefined && o.judgeModel !== config.judge?.model) differs.push(`--judge-model ${o.judgeModel}`);
  if (differs.length) {
    throw new InvalidArgumentError(`--resume continues ${runDir} with the settings of its config.json; these differ: ${differs.join(', ')}. Start a new run to change them.`);
  }
}

/** The rollout servers' token, from the variable --rollout-api-key-env names (never from the command line, which `ps` shows). */
function rolloutApiKey(name: string): string {
  const key = process.env[name];
  if (!key) throw new InvalidArgumentError(`--rollout-api-key-env ${name}: that environment variable is not set`);
  return key;
}

/** The rollout servers named by --rollout-url and their options. */
function rolloutFromCli(o: TrainCliOptions): RolloutPoolSettings {
  if (!o.adapterDir) throw new InvalidArgumentError('--rollout-url needs --adapter-dir DIR (a folder the servers can read, where each step\'s adapter is written)');
  return {
    urls: o.rolloutUrl!, adapterDir: path.resolve(o.adapterDir),
    ...(o.rolloutConcurrency !== undefined ? { concurrencyPerServer: o.rolloutConcurrency } : {}),
    ...(o.validateInProcess ? { validate: false } : {}),
    ...(o.rolloutApiKeyEnv ? { apiKey: rolloutApiKey(o.rolloutApiKeyEnv) } : {}),
  };
}

export function registerTrain(program: Command): Command {
  const cmd = program
    .command('train')
    .description('train a LoRA adapter with GRPO until validation success stops improving')
    .argument('[target...]', 'an http(s) URL, or the server command after --')
    .option('--model <dir|hub-id>', `${MODEL_OPTION_HELP}; a resumed run uses its own`)
    .option('--scenarios <dir>', 'scenario set folder (train.jsonl + val.jsonl), e.g. from `mcprl scenarios`')
    .option('--offline', 'generate verifiable scenarios from the schemas (no LLM)')
    .option('--count <n>', 'scenarios to generate with --offline or an LLM generator', numberParser({ integer: true, above: 0 }), 24)
    .option('--generator-base-url <url>', 'OpenAI-compatible endpoint that writes scenarios')
    .option('--generator-model <name>', 'model that writes scenarios')
    .option('--generator-api-key-env <var>', 'environment variable holding its API key', 'OPENAI_API_KEY')
    .option('--generator-timeout <ms>', `timeout of one generator request (default ${DEFAULT_GENERATOR_TIMEOUT_MS})`, numberParser({ integer: true, above: 0, unit: 'milliseconds' }))
    .option('--judge-base-url <url>', 'OpenAI-compatible endpoint of the RULER judge')
    .option('--judge-model <name>', 'judge model name')
    .option('--judge-api-key-env <var>', 'environment variable holding the judge API key', 'OPENAI_API_KEY')
    .option('--judge-timeout <ms>', `timeout of one judge request (default ${DEFAULT_JUDGE_TIMEOUT_MS})`, numberParser({ integer: true, above: 0, unit: 'milliseconds' }))
    .option('--judge-retry-budget <ms>', `time one group may spend on the judge, retries and Retry-After waits included (default ${DEFAULT_JUDGE_RETRY_BUDGET_MS})`, numberParser({ integer: true, above: 0, unit: 'milliseconds' }));
  addSchemaOptions(cmd, TrainSettingsSchema);
  cmd
    .option('--run <name>', 'run name (default a timestamp)')
    .option('--runs-dir <dir>', 'where runs live', 'runs')
    .option('--resume', 'continue the run (--run NAME) from its newest complete checkpoint, with the settings of its config.json')
    .option('--rollout-url <url>', 'run rollouts on this OpenAI-compatible server in vLLM\'s dialect (runtime LoRA loading); repeat for a pool', (v: string, prev: string[] = []) => [...prev, v])
    .option('--adapter-dir <dir>', 'with --rollout-url: a folder the servers read at the same path; each step\'s adapter is written there')
    .option('--rollout-concurrency <n>', `with --rollout-url: requests in flight per server (default ${RolloutPoolSettingsSchema.shape.concurrencyPerServer.parse(undefined)})`, numberParser({ integer: true, above: 0 }))
    .option('--rollout-api-key-env <var>', 'with --rollout-url: environment variable holding the servers\' bearer token (mcprl serve --token, vLLM --api-key)')
    .option('--validate-in-process', 'with --rollout-url: run validation on the trainer\'s engine, not on the servers')
    .option('--otlp-endpoint <url>', 'export OpenTelemetry traces (steps, rollouts, model and tool calls) to this OTLP/HTTP collector, e.g. http://localhost:4318')
    .option('--quiet', 'no progress on stderr (bars on a terminal, a line per phase otherwise); the step lines stay')
    .option('--json', 'print the result as JSON');
  addTargetOptions(cmd);
  cmd.addHelpText('after', `
Example (the bundled tiny model on the fixture server, offline):
  mcprl train --model fixtures/models/tiny-bookshop --scenarios fixtures/scenarios/bookshop --run demo \\
    -- node --import tsx fixtures/server/main.ts
  mcprl train --run demo --resume -- node --import tsx fixtures/server/main.ts`);
  cmd.action((targetArgs: string[], o: TrainCliOptions) => trainCommand(targetArgs, o));
  return cmd;
}

/**
 * A new run's config from the command line: the training settings as commander read them (trainConfigFromOptions
 * reads their text), the model as given until its folder is resolved, the target and the judge.
 */
function newRunConfig(o: TrainCliOptions, target: string, hasJudge: boolean): TrainConfig {
  if (o.model === undefined) throw new InvalidArgumentError('--model DIR is required (a Hugging Face model folder, or a hub id such as Qwen/Qwen3-4B); only --resume takes the run\'s own');
  if (!o.scenarios && !o.offline && !o.generatorModel) throw new InvalidArgumentError('give --scenarios DIR, --offline, or --generator-model (an LLM writes the tasks)');
  return trainConfigFromOptions(o as unknown as Record<string, unknown>, {
    model: o.model, target,
    ...(hasJudge ? { judge: { baseURL: o.judgeBaseUrl!, model: o.judgeModel!, timeoutMs: o.judgeTimeout, retryBudgetMs: o.judgeRetryBudget } } : {}),
  }, 'add --judge-base-url and --judge-model', flagOf);
}

/** A resumed run's config.json, with the options given again checked against it and the device of this machine. */
async function resumedConfig(o: TrainCliOptions, run: RunDir): Promise<TrainConfig> {
  const config = parseTrainConfig(await run.readConfig(), run.path('config.json'));
  checkResumeOptions(o, config, run.dir);
  return o.device !== undefined ? { ...config, device: o.device } : config;
}

/** The train command's action: the run folder locked, the job built from the options (or the run's config), run, reported. */
async function trainCommand(targetArgs: string[], o: TrainCliOptions): Promise<void> {
  const run = new RunDir(path.join(o.runsDir, o.run ?? `run-${new Date().toISOString().replace(/[:.]/g, '-')}`));
  const progress = new ProgressLog(run.dir, o.quiet || o.json ? [] : [terminalBars()]);
  // A failure is recorded in the run's progress only once the run is this command's (not someone else's run).
  let owned = false;
  let lock: DirLock | undefined;
  let tracing: Awaited<ReturnType<typeof startOtlpTracing>> | undefined;
  // A folder this command creates is its own to remove when it fails before writing anything worth keeping.
  const fresh = !existsSync(run.dir);
  try {
    const target = targetFromCli(targetArgs, o);
    if (o.resume && o.run === undefined) throw new InvalidArgumentError('--resume needs --run NAME (the run to continue)');
    if (o.resume && !run.exists()) throw new InvalidArgumentError(`--resume: no run at ${run.dir}`);
    const hasJudge = o.judgeBaseUrl !== undefined || o.judgeModel !== undefined;
    if (hasJudge && (!o.judgeBaseUrl || !o.judgeModel)) throw new InvalidArgumentError('give both --judge-base-url and --judge-model');
    // A new run's settings are read and checked first, the options handed to the schema as commander read them: a
    // bad value is refused naming its flag before anything is downloaded or a run folder exists.
    const settings = o.resume ? undefined : newRunConfig(o, describeTarget(target), hasJudge);
    // A device that cannot run fails here, naming what is missing, before the run folder exists (a resumed run
    // checks its model's own fit once its config is read, in the job).
    // A hub id is resolved (downloaded when missing) first: the device check reads the model's size.
    const model = settings ? await modelFolder(settings.model, 'mcprl train') : undefined;
    if (model) chooseDevice(o.device, { modelDir: model.dir });
    lock = await run.lock();
    if (!o.resume && run.exists()) throw new InvalidArgumentError(`${run.dir} already exists: pass --resume to continue it, or another --run name`);
    owned = true;

    const config = settings && model ? { ...settings, model: model.dir } : await resumedConfig(o, run);
    const job: TrainJob = {
      config,
      scenarios: {
        dir: o.scenarios, offline: o.offline, count: o.count,
        ...(o.generatorModel ? { generator: { model: o.generatorModel, baseURL: o.generatorBaseUrl, apiKeyEnv: o.generatorApiKeyEnv, timeoutMs: o.generatorTimeout } } : {}),
      },
      judgeApiKeyEnv: o.judgeApiKeyEnv,
      safety: policyFromCli(o).settings(),
      isolation: isolationFromCli(o),
      ...(o.timeout !== undefined ? { connectTimeoutMs: o.timeout } : {}),
      ...(o.rolloutUrl ? { rollout: rolloutFromCli(o) } : {}),
    };

    if (o.otlpEndpoint) tracing = await startOtlpTracing({ endpoint: o.otlpEndpoint, serviceName: 'mcprl-train' });
    printTrainResult(o, run, await runTrainJob({ run, job, target, resume: o.resume, progress }));
  } catch (err) {
    const kind = err instanceof McpConnectError ? `${err.code}: ` : '';
    let line = `${kind}${(err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim()}`;
    // Failed before step 0 completed: nothing was trained, and a plain rerun must not be blocked by the folder.
    if (owned && !o.resume && !existsSync(run.path('state.json'))) {
      if (run.exists()) line += ` (nothing was trained; ${run.dir} keeps this run's config and scenarios: rerun with --run ${run.name} --resume to use them, or delete the folder)`;
      else if (fresh) {
        await rm(run.dir, { recursive: true, force: true });
        owned = false;
      }
    }
    if (owned) progress.failed(line);
    process.stderr.write(`mcprl train: ${line}\n`);
    process.exitCode = 1;
  } finally {
    // Every span still buffered goes out before the command ends.
    await tracing?.shutdown().catch((err: unknown) => process.stderr.write(`mcprl train: traces not all exported: ${(err as Error).message}\n`));
    lock?.release();
  }
}

/** The finished run's figures: JSON with --json, else the lines a person reads. */
function printTrainResult(o: TrainCliOptions, run: RunDir, { result, adapter, report, scenarioSummary }: TrainJobResult): void {
  const t = result.test;
  const out = {
    run: run.dir, val_success_before: result.valBefore, val_success_best: result.valBest, best_step: result.bestStep, stopped: result.state.stopped,
    ...(t ? { test_success_before: t.before, test_success_best: t.best, test_success_last: t.last, last_step: t.lastStep } : {}),
    adapter, report, ...(scenarioSummary ? { scenarios: scenarioSummary } : {}),
  };
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
  if (o.json) process.stdout.write(JSON.stringify(out, null, 2) + '\n');
  else {
    if (scenarioSummary) process.stdout.write(`${formatSummary(scenarioSummary, run.path('scenarios'))}\n`);
    process.stdout.write(`validation success ${pct(result.valBefore)} → ${pct(result.valBest)} (best step ${result.bestStep}, stopped: ${result.state.stopped})` +
      (t ? `; test success ${pct(t.before)} → ${pct(t.best)} (best step), ${pct(t.last)} (last step ${t.lastStep})` : '') + '\n');
    process.stdout.write(`run ${run.dir}\nreport ${report}\n${adapter ? `adapter ${adapter}\n` : 'no adapter beat the untrained model\n'}`);
  }
}
