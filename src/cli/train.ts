/**
 * `mcprl train <target> --model DIR`: GRPO on a LoRA adapter with the in-process engine (see src/train/train.ts).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { connect, McpConnectError, type Target } from '../mcp/index.js';
import { REWARD_MODES, type RewardMode } from '../ruler/blend.js';
import { OpenAIJudge } from '../ruler/judge.js';
import { assertDisjoint } from '../scenarios/disjoint.js';
import { loadScenarioSet, parseScenarios, writeScenarioSet, type Scenario, type ScenarioSet } from '../scenarios/scenario.js';
import { generateScenarioSet } from '../scenarios/scenario-set.js';
import { RunDir } from '../train/run-dir.js';
import { TrainConfigSchema, train, type TrainConfig } from '../train/train.js';
import { writeRunReport } from '../train/write-report.js';
import { writeJsonAtomic } from '../util/atomic.js';
import { addTargetOptions, connectOptionsFromCli, policyFromCli, targetFromCli, type TargetCliOptions } from './target-options.js';

interface TrainCliOptions extends TargetCliOptions {
  model: string;
  scenarios?: string;
  offline?: boolean;
  count: number;
  generatorBaseUrl?: string;
  generatorModel?: string;
  generatorApiKeyEnv: string;
  reward?: RewardMode;
  judgeBaseUrl?: string;
  judgeModel?: string;
  judgeApiKeyEnv: string;
  rolloutsPerGroup?: number;
  groupsPerStep?: number;
  updatesPerStep?: number;
  lr?: number;
  rank?: number;
  alpha?: number;
  targets?: string;
  loss?: TrainConfig['loss'];
  beta?: number;
  maxSteps?: number;
  evalEvery?: number;
  patience?: number;
  seed?: number;
  temperature?: number;
  maxTurns?: number;
  maxTokens?: number;
  concurrency?: number;
  run?: string;
  runsDir: string;
  resume?: boolean;
  quiet?: boolean;
  json?: boolean;
}

const num = (check: (n: number) => boolean, what: string) => (v: string): number => {
  const n = Number(v);
  if (!check(n)) throw new InvalidArgumentError(`expected ${what}`);
  return n;
};
const posInt = num((n) => Number.isInteger(n) && n > 0, 'a positive integer');
const int = num((n) => Number.isInteger(n), 'an integer');
const pos = num((n) => n > 0, 'a positive number');
const nonNeg = num((n) => n >= 0, 'a number >= 0');

/** A short description of the target for config.json: never header values or environment values. */
export function describeTarget(t: Target): string {
  return t.kind === 'stdio' ? [t.command, ...t.args].join(' ') : t.url;
}

async function scenariosFor(o: TrainCliOptions, target: Target, run: RunDir, seed: number): Promise<ScenarioSet> {
  if (o.resume && existsSync(run.path('scenarios', 'train.jsonl'))) return loadScenarioSet(run.path('scenarios'));
  if (o.scenarios) return loadScenarioSet(o.scenarios);
  if (!o.offline && !o.generatorModel) throw new InvalidArgumentError('give --scenarios DIR, --offline, or --generator-model (an LLM writes the tasks)');
  const session = await connect(target, connectOptionsFromCli(o));
  try {
    const apiKey = process.env[o.generatorApiKeyEnv];
    const set = await generateScenarioSet(session, {
      count: o.count, seed, offline: o.offline,
      ...(o.generatorModel ? { generator: { model: o.generatorModel, baseURL: o.generatorBaseUrl, apiKey } } : {}),
    });
    return { train: set.train, val: set.val, test: [] };
  } finally {
    await session.close();
  }
}

/** The warm-up tasks recorded with a bundled model (mcprl_warmup.jsonl), if any: validation must avoid them too. */
async function warmupScenarios(modelDir: string): Promise<Scenario[]> {
  const file = path.join(modelDir, 'mcprl_warmup.jsonl');
  return existsSync(file) ? parseScenarios(await readFile(file, 'utf8'), file) : [];
}

export function registerTrain(program: Command): Command {
  const cmd = program
    .command('train')
    .description('train a LoRA adapter with GRPO until validation success stops improving')
    .argument('[target...]', 'an http(s) URL, or the server command after --')
    .requiredOption('--model <dir>', 'Hugging Face model folder (qwen3, qwen2 or llama)')
    .option('--scenarios <dir>', 'scenario set folder (train.jsonl + val.jsonl), e.g. from `mcprl scenarios`')
    .option('--offline', 'generate verifiable scenarios from the schemas (no LLM)')
    .option('--count <n>', 'scenarios to generate with --offline or an LLM generator', posInt, 24)
    .option('--generator-base-url <url>', 'OpenAI-compatible endpoint that writes scenarios')
    .option('--generator-model <name>', 'model that writes scenarios')
    .option('--generator-api-key-env <var>', 'environment variable holding its API key', 'OPENAI_API_KEY')
    .addOption(new Option('--reward <mode>', 'reward: ruler, checks or blend (default: blend with a judge, checks without)').choices([...REWARD_MODES]))
    .option('--judge-base-url <url>', 'OpenAI-compatible endpoint of the RULER judge')
    .option('--judge-model <name>', 'judge model name')
    .option('--judge-api-key-env <var>', 'environment variable holding the judge API key', 'OPENAI_API_KEY')
    .option('--rollouts-per-group <k>', 'attempts per scenario (default 4)', posInt)
    .option('--groups-per-step <g>', 'scenarios per step (default 8)', posInt)
    .option('--updates-per-step <n>', "optimiser steps per step: the step's groups split into n minibatches (default 1)", posInt)
    .option('--lr <lr>', 'AdamW learning rate (default 5e-4)', pos)
    .option('--rank <r>', 'LoRA rank (default 16)', posInt)
    .option('--alpha <a>', 'LoRA alpha (default 32)', pos)
    .option('--targets <list>', 'LoRA target modules, comma-separated (default all seven projections)')
    .addOption(new Option('--loss <kind>', 'policy loss (default grpo)').choices(['grpo', 'dapo', 'dr_grpo', 'cispo', 'gspo']))
    .option('--beta <b>', 'KL coefficient against the base model (default 0)', nonNeg)
    .option('--max-steps <n>', 'training steps at most (default 20)', posInt)
    .option('--eval-every <n>', 'validate every N steps (default 2)', posInt)
    .option('--patience <n>', 'stop after N validations without improvement (default 3)', posInt)
    .option('--seed <s>', 'seed for scenarios, sampling and the adapter (default 1)', int)
    .option('--temperature <t>', 'sampling temperature of training rollouts (default 1)', nonNeg)
    .option('--max-turns <n>', 'assistant turns per rollout (default 6)', posInt)
    .option('--max-tokens <n>', 'tokens per assistant turn (default 256)', posInt)
    .option('--concurrency <c>', 'rollouts in flight at once (default 8)', posInt)
    .option('--run <name>', 'run name (default a timestamp)')
    .option('--runs-dir <dir>', 'where runs live', 'runs')
    .option('--resume', 'continue the run from its newest complete checkpoint')
    .option('--quiet', 'no progress bars')
    .option('--json', 'print the result as JSON');
  addTargetOptions(cmd);
  cmd.addHelpText('after', `
Example (the bundled tiny model on the fixture server, offline):
  mcprl train --model fixtures/models/tiny-bookshop --scenarios fixtures/scenarios/bookshop --run demo \\
    -- node --import tsx fixtures/server/main.ts`);
  cmd.action(async (targetArgs: string[], o: TrainCliOptions) => {
    try {
      const target = targetFromCli(targetArgs, o);
      const run = new RunDir(path.join(o.runsDir, o.run ?? `run-${new Date().toISOString().replace(/[:.]/g, '-')}`));
      if (o.resume && !run.exists()) throw new InvalidArgumentError(`--resume: no run at ${run.dir}`);
      if (!o.resume && run.exists()) throw new InvalidArgumentError(`${run.dir} already exists: pass --resume to continue it, or another --run name`);
      const hasJudge = o.judgeBaseUrl !== undefined || o.judgeModel !== undefined;
      if (hasJudge && (!o.judgeBaseUrl || !o.judgeModel)) throw new InvalidArgumentError('give both --judge-base-url and --judge-model');
      const reward: RewardMode = o.reward ?? (hasJudge ? 'blend' : 'checks');
      if (reward !== 'checks' && !hasJudge) throw new InvalidArgumentError(`--reward ${reward} needs a judge: add --judge-base-url and --judge-model`);

      const config: TrainConfig = o.resume
        ? TrainConfigSchema.parse(await run.readConfig())
        : TrainConfigSchema.parse({
            model: path.resolve(o.model), target: describeTarget(target), reward,
            rolloutsPerGroup: o.rolloutsPerGroup, groupsPerStep: o.groupsPerStep, updatesPerStep: o.updatesPerStep, lr: o.lr, rank: o.rank, alpha: o.alpha,
            targets: o.targets?.split(',').map((s) => s.trim()).filter(Boolean), loss: o.loss, beta: o.beta,
            maxSteps: o.maxSteps, evalEvery: o.evalEvery, patience: o.patience, seed: o.seed, temperature: o.temperature,
            maxTurns: o.maxTurns, maxTokens: o.maxTokens, concurrency: o.concurrency,
            ...(hasJudge ? { judge: { baseURL: o.judgeBaseUrl!, model: o.judgeModel! } } : {}),
          });
      const scenarios = await scenariosFor(o, target, run, config.seed);
      if (scenarios.train.length === 0 || scenarios.val.length === 0) throw new InvalidArgumentError('training needs at least one train and one val scenario');
      const warmup = await warmupScenarios(config.model);
      assertDisjoint('validation', scenarios.val, { train: scenarios.train, 'warm-up': warmup });
      assertDisjoint('test', scenarios.test, { train: scenarios.train, validation: scenarios.val, 'warm-up': warmup });
      if (!o.resume) {
        await writeJsonAtomic(run.path('config.json'), config);
        await writeScenarioSet(run.path('scenarios'), scenarios.train, scenarios.val, scenarios.test);
      }
      const judge = config.judge ? new OpenAIJudge({ ...config.judge, apiKey: process.env[o.judgeApiKeyEnv] }) : undefined;

      const result = await train({ run, config, target, scenarios, judge, safety: policyFromCli(o), resume: o.resume, progress: !o.quiet && !o.json });
      const { adapter, report } = await writeRunReport(run, { exportBest: true });
      const t = result.test;
      const out = {
        run: run.dir, val_success_before: result.valBefore, val_success_best: result.valBest, best_step: result.bestStep, stopped: result.state.stopped,
        ...(t ? { test_success_before: t.before, test_success_best: t.best, test_success_last: t.last, last_step: t.lastStep } : {}),
        adapter, report,
      };
      const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
      if (o.json) process.stdout.write(JSON.stringify(out, null, 2) + '\n');
      else {
        process.stdout.write(`validation success ${pct(result.valBefore)} → ${pct(result.valBest)} (best step ${result.bestStep}, stopped: ${result.state.stopped})` +
          (t ? `; test success ${pct(t.before)} → ${pct(t.best)} (best step), ${pct(t.last)} (last step ${t.lastStep})` : '') + '\n');
        process.stdout.write(`run ${run.dir}\nreport ${report}\n${adapter ? `adapter ${adapter}\n` : 'no adapter beat the untrained model\n'}`);
      }
    } catch (err) {
      const kind = err instanceof McpConnectError ? `${err.code}: ` : '';
      process.stderr.write(`mcprl train: ${kind}${(err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim()}\n`);
      process.exitCode = 1;
    }
  });
  return cmd;
}
