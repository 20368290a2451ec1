/**
 * The engine in this process: each registered model's adapter is trained by a Trainer on its base model and
 * served by the OpenAI-compatible server (src/serve) on loopback, one server for every model of the backend.
 *
 * Everything is kept under the backend's folder, one folder per model (a RunDir; `modelDir` may place it elsewhere):
 *
 *   <dir>/<project>/<name>/model.json                  the model's settings
 *   <dir>/<project>/<name>/checkpoints/step-NNNN/      PEFT adapter + optimiser state after step N (0: fresh)
 *   <dir>/<project>/<name>/train-results.jsonl         one TrainResult per step
 *
 * A checkpoint folder appears whole or not at all (written beside and renamed), so a backend killed at any
 * moment resumes from the newest complete step when the model is registered again.
 *
 * The trainer's adapter (`<name>@train`) changes as it trains, so it is never served itself: after each step the
 * saved checkpoint is loaded as `<name>@step-N` and the model's name is routed to it (src/chat/adapter-routes.ts).
 */
import { existsSync, statSync } from 'node:fs';
import { readdir, readFile, rm, rmdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import type { ChatMessage, OpenAITool } from '../agent/policy.js';
import { ChatEngine } from '../chat/chat-engine.js';
import { HfTokenizer } from '../chat/tokenizer.js';
import { exportModel } from '../export/export-model.js';
import { HubError, resolveModel, type DownloadProgress } from '../hf/hub.js';
import { Model, modelLoadOptions } from '../engine/model.js';
import type { PrefixCacheMib } from '../engine/prefix-cache.js';
import type { KvCacheMib } from '../engine/kv-cache.js';
import { Trainer } from '../engine/trainer.js';
import type { LossConfig, StepMetrics, TrainSequence } from '../engine/train-types.js';
import type { Device } from '../engine/device.js';
import type { WeightDtype } from '../engine/weight-dtype.js';
import { startServer, type RunningServer } from '../serve/server.js';
import { advantagesFor } from '../train/advantages.js';
import { meanStepMetrics, minibatches } from '../train/minibatches.js';
import { applyTruncatedIs } from '../train/off-policy.js';
import { RunDir } from '../train/run-dir.js';
import type { LrSchedule } from '../train/step-settings.js';
import { emptyTokenizationReport, trajectoryToSequences } from '../train/tokenize.js';
import { writeJsonAtomic, writeJsonlAtomic } from '../util/atomic.js';
import type { ProgressListener } from '../util/progress.js';
import type { Backend, ModelKey, StepCallOptions } from './backend.js';
import { BackendError, parseInput } from './errors.js';
import {
  DeleteCheckpointsSchema,
  ExportOptionsSchema,
  SftConfigSchema,
  SftTrajectorySchema,
  TrainableModelSettingsSchema,
  TrainStepConfigSchema,
  TrajectoryGroupSchema,
  type Checkpoint,
  type DeleteCheckpointsInput,
  type ExportOptionsInput,
  type ExportResult,
  type ModelEndpoint,
  type SftConfigInput,
  type SftTrajectory,
  type SftTrajectoryInput,
  type TrainableModelSettings,
  type TrainableModelSettingsInput,
  type TrainResult,
  type TrainStepConfigInput,
  type TrajectoryGroup,
  type TrajectoryGroupInput,
} from './schemas.js';

export interface LocalBackendOptions {
  /** Folder everything is kept under (created when missing). */
  dir: string;
  /** Engine threads. Default: the engine's. */
  threads?: number;
  /** Where the engines run: cpu, cuda or auto (src/engine/device.ts). Default auto. */
  device?: Device;
  /** Chat template variables for every request served (e.g. `{ enable_thinking: false }`). Default none. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** How the base models' weights are kept in memory on CPU (src/engine/weight-dtype.ts). Default: the engine's (auto). */
  weightDtype?: WeightDtype;
  /** The engines' prefix cache budget in MiB, 0 off (src/engine/prefix-cache.ts). Default: the engine's. */
  prefixCacheMib?: PrefixCacheMib;
  /** The engines' KV cache budget in MiB (src/engine/kv-cache.ts). Default: the engine's (a share of the memory available). */
  kvCacheMib?: KvCacheMib;
  /**
   * The folder a model is kept in. Default `<dir>/<project>/<name>`. `mcprl train` keeps its one model in the run's
   * own folder, so that the run's checkpoints are the model's.
   */
  modelDir?: (key: ModelKey) => string;
  /** Called as a hub model's files download when a model registers (src/hf/hub.ts). Default: nothing reported. */
  onDownload?: (p: DownloadProgress) => void;
  /**
   * The endpoint to report for every model instead of starting a loopback server: for a server that fronts
   * `chatEngines()` itself (`mcprl backend`). Default: a loopback server on a free port.
   */
  endpoint?: { baseURL: string; apiKey: string };
}

/** The key a loopback LocalBackend's endpoint accepts (it checks none; OpenAI's client wants one). */
const LOCAL_API_KEY = 'mcprl-local';

/** One TrainResult per step, in the model's folder. */
const RESULTS_FILE = 'train-results.jsonl';

interface BaseModel {
  model: Model;
  engine: ChatEngine;
}

interface LoadedModel {
  settings: TrainableModelSettings;
  base: BaseModel;
  trainer: Trainer;
  run: RunDir;
  /**
   * Steps taken: the newest checkpoint's number. Not the trainer's step, which counts optimiser steps (several per
   * step with `updates`).
   */
  step: number;
  /** Steps of this model run one after another: each train() call chains onto the last. */
  queue: Promise<unknown>;
}

export class LocalBackend implements Backend {
  readonly dir: string;
  private readonly opts: LocalBackendOptions;
  private readonly bases = new Map<string, Promise<BaseModel>>();
  private readonly models = new Map<string, LoadedModel>();
  /** Registrations under way: a second register() of the same model waits for the first. */
  private readonly registering = new Map<string, Promise<unknown>>();
  private server: Promise<RunningServer> | null = null;
  private closed = false;

  constructor(opts: LocalBackendOptions) {
    this.opts = opts;
    this.dir = resolve(opts.dir);
  }

  /**
   * The engine serving a registered model, for rollouts in this process without HTTP (as `mcprl train` runs them):
   * the model's name is routed to its newest adapter, and held while a step runs, as on the endpoint.
   */
  chatEngine(key: ModelKey): ChatEngine {
    return this.loaded(key).base.engine;
  }

  /** The engines serving the registered models, one per base model (for a server that fronts them). */
  chatEngines(): ChatEngine[] {
    return [...new Set([...this.models.values()].map((m) => m.base.engine))];
  }

  async register(settingsIn: TrainableModelSettingsInput): Promise<ModelEndpoint> {
    this.checkOpen();
    const settings = parseInput(TrainableModelSettingsSchema, settingsIn, 'settings');
    const key = keyOf(settings);
    const earlier = this.registering.get(key) ?? Promise.resolve();
    const mine = earlier.catch(() => undefined).then(() => this.registerNow(settings, key));
    this.registering.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.registering.get(key) === mine) this.registering.delete(key);
    }
  }

  private async registerNow(settings: TrainableModelSettings, key: string): Promise<ModelEndpoint> {
    const loaded = this.models.get(key);
    if (loaded) {
      sameSettings(loaded.settings, settings, `${key} is registered`);
      // A step in flight has already counted itself in trainer.step; the step reported must have its checkpoint.
      await loaded.queue;
      return this.endpointOf(loaded);
    }
    for (const m of this.models.values()) {
      if (m.settings.name === settings.name) {
        throw new BackendError('BACKEND_CONFLICT', `the name ${settings.name} is served already for project ${m.settings.project}`, { field: 'settings.name' });
      }
    }
    if (!this.opts.modelDir) {
      // `mcprl backend` keeps its lock file in the folder (`<dir>/lock`): a project of that name has no folder there.
      const project = join(this.dir, settings.project);
      if (existsSync(project) && !statSync(project).isDirectory()) {
        throw new BackendError('BACKEND_INVALID', `settings.project: ${project} is a file, not a project folder: choose another project name`, { field: 'settings.project' });
      }
    }
    const baseDir = await this.baseFolder(settings.baseModel);
    // A folder that is not there is the caller's mistake (400 naming the field), not the server's failure.
    if (!this.bases.has(baseDir) && !existsSync(join(baseDir, 'config.json'))) {
      throw new BackendError('BACKEND_INVALID', `settings.baseModel: no Hugging Face model folder at ${settings.baseModel} (no config.json there)`, { field: 'settings.baseModel' });
    }
    const base = await this.base(baseDir);
    if (settings.name === base.engine.modelName) {
      throw new BackendError('BACKEND_CONFLICT', `the name ${settings.name} is the base model's own served name: choose another`, { field: 'settings.name' });
    }
    const run = new RunDir(this.opts.modelDir ? resolve(this.opts.modelDir(settings)) : join(this.dir, settings.project, settings.name));
    // model.json is the registration's commit point, written once the model has loaded and serves: a registration
    // that fails (a rank the engine cannot allocate, a missing base model) leaves the folder as it found it, and the
    // next registration of the name is not held to settings that never worked.
    const settingsFile = run.path('model.json');
    const registered = existsSync(settingsFile);
    if (registered) {
      const saved = parseInput(TrainableModelSettingsSchema, JSON.parse(await readFile(settingsFile, 'utf8')), 'model.json');
      sameSettings(saved, settings, `${settingsFile} holds`);
    }
    // Without model.json, a step-0 checkpoint is what a registration cut short left behind (a fresh adapter of
    // settings nobody registered): it is made again from these settings.
    const found = await savedSteps(run);
    const steps = registered || found.some((s) => s > 0) ? found : [];
    // What a failed registration removes: the folders it created (those still empty of others' models), else the
    // checkpoint it wrote.
    const created = outermostMissing(run.dir);
    const trainName = `${settings.name}@train`;
    const step = steps.length > 0 ? steps[steps.length - 1] : 0;
    let trainer: Trainer | undefined;
    let wroteStep0 = false;
    let model: LoadedModel;
    try {
      if (steps.length > 0) {
        trainer = await Trainer.resume(base.model, run.checkpoint(step), { adapterName: trainName });
      } else {
        const l = settings.lora;
        // No optimiser settings here: each step gives its own (optimizerStep).
        trainer = await Trainer.create(base.model, { adapterName: trainName, rank: l.rank, alpha: l.alpha, targets: l.targets, seed: l.seed });
        wroteStep0 = true;
        await trainer.save(run.checkpoint(0));
      }
      base.engine.routes.hide(trainName);
      model = { settings, base, trainer, run, step, queue: Promise.resolve() };
      await this.serveCheckpoint(model, step);
      if (!registered) await writeJsonAtomic(settingsFile, settings);
    } catch (err) {
      base.engine.routes.delete(settings.name);
      trainer?.close();
      if (created) await removeCreated(run.dir, created);
      else if (wroteStep0) await rm(run.checkpoint(0), { recursive: true, force: true });
      throw err;
    }
    this.models.set(key, model);
    return this.endpointOf(model);
  }

  train(key: ModelKey, groupsIn: readonly TrajectoryGroupInput[], configIn: TrainStepConfigInput = {}, opts: StepCallOptions = {}): Promise<TrainResult> {
    return this.enqueue(
      key,
      () => ({
        groups: parseInput(z.array(TrajectoryGroupSchema), groupsIn, 'groups'),
        config: parseInput(TrainStepConfigSchema, configIn, 'config'),
      }),
      (model, { groups, config }) => this.step(model, groups, config, progressOf(model, opts.onProgress)),
    );
  }

  /**
   * One supervised step (cross-entropy on the assistant turns) on `trajectories`, for warm-up or to distil a
   * stronger model's trajectories. Held inference and checkpoints as for train(); rewards are not used.
   */
  sft(key: ModelKey, trajectoriesIn: readonly SftTrajectoryInput[], configIn: SftConfigInput = {}, opts: StepCallOptions = {}): Promise<TrainResult> {
    return this.enqueue(
      key,
      () => ({
        trajectories: parseInput(z.array(SftTrajectorySchema).min(1), trajectoriesIn, 'trajectories'),
        config: parseInput(SftConfigSchema, configIn, 'config'),
      }),
      async (model, { trajectories, config }) => {
        const { sequences, retokenizedTurns, tokenIdsDiffer } = this.sequences(model, trajectories.map((t) => ({ t, advantage: 0 })));
        const summary = {
          groups: 0, droppedGroups: 0, trajectories: trajectories.length, sequences: sequences.length, retokenizedTurns, tokenIdsDiffer, reward: 0,
          metrics: meanMetrics(trajectories.map((t) => t.metrics)), advantages: [],
        };
        return this.optimizerStep(model, [sequences], { kind: 'sft' }, { ...config, updates: 1, alwaysStep: false }, summary, progressOf(model, opts.onProgress));
      },
    );
  }

  /**
   * Checks the call (`parse` throws for bad input) and runs `work` after the model's earlier steps. Everything
   * up to the hold happens before this returns: the model's name is held from the call (a request sent after
   * it waits) until `work` has ended and the new adapter serves.
   */
  private enqueue<T>(key: ModelKey, parse: () => T, work: (model: LoadedModel, input: T) => Promise<TrainResult>): Promise<TrainResult> {
    let model: LoadedModel;
    let input: T;
    try {
      this.checkOpen();
      model = this.loaded(key);
      input = parse();
    } catch (err) {
      return Promise.reject(err);
    }
    const release = model.base.engine.routes.hold(model.settings.name);
    const step = model.queue.then(() => work(model, input));
    model.queue = step.catch(() => undefined);
    return step.finally(release);
  }

  async checkpoints(key: ModelKey): Promise<Checkpoint[]> {
    const model = this.loaded(key);
    const metrics = new Map((await model.run.readRows(RESULTS_FILE, 'a step\'s TrainResult')).map((m) => [m.step as number, numbersOf(m)]));
    return (await savedSteps(model.run)).map((step) => ({ step, dir: model.run.checkpoint(step), metrics: metrics.get(step) ?? {} }));
  }

  async deleteCheckpoints(key: ModelKey, opts: DeleteCheckpointsInput = {}): Promise<number[]> {
    const { metric, best: chosen } = parseInput(DeleteCheckpointsSchema, opts, 'options');
    const model = this.loaded(key);
    await model.queue;
    const all = await this.checkpoints(key);
    if (all.length === 0) return [];
    const latest = all[all.length - 1].step;
    const scored = all.filter((c) => Number.isFinite(c.metrics[metric]));
    const best = chosen ?? (scored.length > 0 ? scored.reduce((a, b) => (b.metrics[metric] > a.metrics[metric] ? b : a)).step : latest);
    await model.run.pruneCheckpoints([latest, best]);
    return all.map((c) => c.step).filter((s) => s !== latest && s !== best);
  }

  async export(key: ModelKey, opts: ExportOptionsInput = {}): Promise<ExportResult> {
    const o = parseInput(ExportOptionsSchema, opts, 'options');
    const model = this.loaded(key);
    const steps = await savedSteps(model.run);
    const step = o.step ?? steps[steps.length - 1];
    if (!steps.includes(step)) {
      throw new BackendError('BACKEND_INVALID', `options.step: no checkpoint of step ${step} (kept: ${steps.join(', ')})`, { field: 'options.step' });
    }
    const dir = model.run.path('exports', `${o.format}-step-${String(step).padStart(4, '0')}`);
    const summary = await exportModel({
      modelDir: model.base.model.dir,
      adapterDir: model.run.checkpoint(step),
      format: o.format,
      out: dir,
      overwrite: true,
      ...(o.dtype !== undefined ? { dtype: o.dtype } : {}),
      ...(o.logits !== undefined ? { logits: o.logits } : {}),
    });
    return { format: o.format, step, dir, detail: summary.detail };
  }

  async delete(key: ModelKey): Promise<void> {
    const model = this.loaded(key);
    await model.queue;
    this.models.delete(keyOf(key));
    model.base.engine.routes.delete(model.settings.name);
    model.trainer.close();
    await rm(model.run.dir, { recursive: true, force: true });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.models.values()].map((m) => m.queue));
    if (this.server) await (await this.server).close();
    for (const b of this.bases.values()) (await b).model.close();
    this.models.clear();
  }

  // -------------------------------------------------------------------------------------------------------

  private async step(model: LoadedModel, groups: TrajectoryGroup[], config: z.output<typeof TrainStepConfigSchema>, progress: StepProgress): Promise<TrainResult> {
    const trajectories = groups.flatMap((g) => g.trajectories);
    // advantages: compare each attempt with the others of its group; groups without signal are dropped
    progress('score', 0, groups.length);
    const adv = advantagesFor(config.loss, groups.map((g) => g.trajectories.map((t) => t.reward)));
    progress('score', groups.length, groups.length);
    // sequences, group by group: from the recorded token ids (the chat template renders the prompts, as generation did)
    const perGroup = adv.kept.map((g, k) => this.sequences(model, groups[g].trajectories.map((t, i) => ({ t, advantage: adv.advantages[k][i] }))));
    const sequences = perGroup.flatMap((p) => p.sequences);
    // off-policy correction: another engine's logprobs, weighed against this model's own (truncated IS)
    const offPolicy = config.tisCap !== undefined && sequences.length > 0 ? await applyTruncatedIs(model.base.model, model.trainer.adapterName, sequences, config.tisCap) : undefined;
    const summary = {
      groups: groups.length,
      droppedGroups: adv.droppedZeroVariance,
      trajectories: trajectories.length,
      sequences: sequences.length,
      retokenizedTurns: perGroup.reduce((a, p) => a + p.retokenizedTurns, 0),
      tokenIdsDiffer: perGroup.reduce((a, p) => a + p.tokenIdsDiffer, 0),
      reward: mean(trajectories.map((t) => t.reward)),
      metrics: meanMetrics(trajectories.map((t) => t.metrics)),
      advantages: groups.map((_, g) => (adv.kept.includes(g) ? adv.advantages[adv.kept.indexOf(g)] : null)),
      ...(offPolicy ? { offPolicy } : {}),
    };
    const loss = { kind: config.loss, beta: config.beta, ...(config.clipEpsilon !== undefined ? { clipEpsilon: config.clipEpsilon } : {}) };
    return this.optimizerStep(model, minibatches(perGroup.map((p) => p.sequences), config.updates), loss, config, summary, progress);
  }

  /** Training sequences of trajectories, each with its advantage; counts the assistant turns tokenised from text. */
  private sequences(model: LoadedModel, items: { t: SftTrajectory; advantage: number }[]): { sequences: TrainSequence[]; retokenizedTurns: number; tokenIdsDiffer: number } {
    const sequences: TrainSequence[] = [];
    // The tokenisation counts the turns it had to re-tokenise (the same count `mcprl train` reports).
    const report = emptyTokenizationReport();
    for (const { t, advantage } of items) {
      const messages = t.messages as ChatMessage[];
      // The tools are passed to the chat template as they were offered (OpenAI's shape, description optional).
      sequences.push(...trajectoryToSequences(model.base.engine, { messages, tools: t.tools as OpenAITool[] }, advantage, { report }));
    }
    return { sequences, retokenizedTurns: report.retokenized, tokenIdsDiffer: report.differs };
  }

  /** step → checkpoint → serve: one optimiser step per minibatch, saved, and its adapter served. */
  private async optimizerStep(
    model: LoadedModel,
    batches: TrainSequence[][],
    loss: LossConfig,
    config: { lr: number; microBatchTokens?: number; lrSchedule?: LrSchedule; updates: number; alwaysStep: boolean },
    summary: Omit<TrainResult, 'step' | 'trained'>,
    progress: StepProgress,
  ): Promise<TrainResult> {
    const total = batches.reduce((a, b) => a + b.length, 0);
    if (total === 0 && !config.alwaysStep) return { step: model.step, trained: false, ...summary };
    // step: one optimiser step per minibatch, the trainer taking each one's rate from the call's schedule (an SFT call's: constant)
    const trainer = model.trainer;
    let m: StepMetrics | null = null;
    if (total > 0) {
      progress('train', 0, total);
      const all: StepMetrics[] = [];
      let done = 0;
      for (const b of batches) {
        const micro = config.microBatchTokens !== undefined ? { microBatchTokens: config.microBatchTokens } : {};
        all.push(await trainer.trainStep(b, loss, { optimizer: { lr: config.lr }, schedule: config.lrSchedule, ...micro }));
        progress('train', (done += b.length), total);
      }
      m = meanStepMetrics(all);
    } else {
      // alwaysStep with nothing to train: the optimiser's count moves on as if it had (see TrainStepConfigSchema).
      trainer.step += config.updates;
    }
    // checkpoint: the adapter and optimiser state, whole or not at all; then its numbers. The model's step is this
    // one only once its checkpoint exists.
    progress('checkpoint', 0, 1);
    const step = model.step + 1;
    const checkpoint = model.run.checkpoint(step);
    await trainer.save(checkpoint);
    model.step = step;
    const result: TrainResult = {
      step,
      trained: m !== null,
      ...summary,
      ...(m
        ? {
            loss: m.loss,
            policyLoss: m.policyLoss,
            kl: m.kl,
            clipFraction: m.clipFraction,
            gradNorm: m.gradNorm,
            ...(m.entropy !== undefined ? { entropy: m.entropy } : {}),
            trainedTokens: m.trainedTokens,
            meanRatio: m.meanRatio,
            tokensPerSecond: m.tokensPerSecond,
            ...(m.lr !== undefined ? { lr: m.lr } : {}),
          }
        : {}),
      checkpoint,
    };
    const rows = (await model.run.readRows(RESULTS_FILE, 'a step\'s TrainResult')).filter((r) => (r.step as number) < result.step);
    await writeJsonlAtomic(model.run.path(RESULTS_FILE), [...rows, result]);
    // serve: the saved adapter replaces the served one (requests in flight keep theirs)
    await this.serveCheckpoint(model, model.step);
    progress('checkpoint', 1, 1);
    return result;
  }

  /** Loads checkpoint `step` and routes the model's name to it. */
  private async serveCheckpoint(model: LoadedModel, step: number): Promise<void> {
    const { engine } = model.base;
    const adapter = `${model.settings.name}@step-${step}`;
    const dir = model.run.checkpoint(step);
    await model.base.model.loadAdapter(adapter, dir);
    engine.adapterDirs.set(adapter, dir);
    engine.routes.set(model.settings.name, adapter);
  }

  /**
   * The base model's folder (a hub id's is in the Hugging Face cache), resolved where the model runs: a RemoteBackend's
   * server does it on its own machine. A model that cannot be had is the caller's mistake; a corrupt download is not.
   */
  private async baseFolder(ref: string): Promise<string> {
    try {
      return await resolveModel(ref, this.opts.onDownload ? { onProgress: this.opts.onDownload } : {});
    } catch (err) {
      if (err instanceof HubError && err.code !== 'HUB_CHECKSUM' && err.code !== 'HUB_HTTP') {
        throw new BackendError('BACKEND_INVALID', `settings.baseModel: ${err.message}`, { field: 'settings.baseModel', cause: err });
      }
      throw err;
    }
  }

  private base(dir: string): Promise<BaseModel> {
    const abs = resolve(dir);
    let b = this.bases.get(abs);
    if (!b) {
      b = (async () => {
        const tokenizer = await HfTokenizer.load(abs);
        const model = await Model.load(abs, modelLoadOptions(this.opts));
        const engine = new ChatEngine(model, tokenizer, this.opts.chatTemplateKwargs ? { chatTemplateKwargs: this.opts.chatTemplateKwargs } : {});
        return { model, engine };
      })();
      b.catch(() => this.bases.delete(abs));
      this.bases.set(abs, b);
    }
    return b;
  }

  private async endpointOf(model: LoadedModel): Promise<ModelEndpoint> {
    let endpoint = this.opts.endpoint;
    if (!endpoint) {
      this.server ??= startServer(() => this.chatEngines(), { host: '127.0.0.1', port: 0 });
      endpoint = { baseURL: (await this.server).url, apiKey: LOCAL_API_KEY };
    }
    return { ...endpoint, inferenceName: model.settings.name, step: model.step };
  }

  private loaded(key: ModelKey): LoadedModel {
    const m = this.models.get(keyOf(key));
    if (!m) throw new BackendError('BACKEND_NOT_REGISTERED', `model ${keyOf(key)} is not registered with this backend`, { field: 'model' });
    return m;
  }

  private checkOpen(): void {
    if (this.closed) throw new BackendError('BACKEND_STATE', 'the backend is closed');
  }
}

/** Reports one phase of the step in flight (the step it will be once done). */
type StepProgress = (phase: 'score' | 'train' | 'checkpoint', done: number, total: number) => void;

/**
 * The step's progress reporter, made when the step's work begins (so the trainer's step is the one before it). A
 * listener that throws is the caller's bug, not the step's: it must not leave a step half done, so its error is
 * dropped.
 */
function progressOf(model: LoadedModel, listener: ProgressListener | undefined): StepProgress {
  if (!listener) return () => {};
  const step = model.step + 1;
  return (phase, done, total) => {
    try {
      listener({ phase, step, done, total, time: Date.now() });
    } catch {
      // see above
    }
  };
}

function keyOf(k: ModelKey): string {
  return `${k.project}/${k.name}`;
}

/** Throws BACKEND_CONFLICT naming the first setting that differs. */
function sameSettings(have: TrainableModelSettings, want: TrainableModelSettings, where: string): void {
  const fields: [string, unknown, unknown][] = [
    ['baseModel', resolve(have.baseModel), resolve(want.baseModel)],
    ['lora.rank', have.lora.rank, want.lora.rank],
    ['lora.alpha', have.lora.alpha, want.lora.alpha],
    ['lora.targets', [...have.lora.targets].sort().join(','), [...want.lora.targets].sort().join(',')],
  ];
  for (const [field, a, b] of fields) {
    if (a !== b) throw new BackendError('BACKEND_CONFLICT', `${where} ${field} = ${String(a)}, not ${String(b)}`, { field: `settings.${field}` });
  }
}

/** The outermost of `dir` and its parents that does not exist (null when `dir` exists). */
function outermostMissing(dir: string): string | null {
  let missing: string | null = null;
  for (let d = dir; !existsSync(d); d = dirname(d)) missing = d;
  return missing;
}

/**
 * Removes `dir` and then its parents up to `outermost` while they are empty: another model registering under the
 * same new project folder at the same time keeps its own.
 */
async function removeCreated(dir: string, outermost: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  for (let d = dirname(dir); d.length >= outermost.length; d = dirname(d)) {
    try {
      await rmdir(d);
    } catch {
      return;
    }
  }
}

/** Steps with a complete checkpoint folder, oldest first (leftovers of interrupted writes are not steps). */
async function savedSteps(run: RunDir): Promise<number[]> {
  const dir = run.path('checkpoints');
  if (!existsSync(dir)) return [];
  const steps: number[] = [];
  for (const entry of await readdir(dir)) {
    const m = /^step-(\d+)$/.exec(entry);
    if (m && existsSync(join(dir, entry, 'adapter_model.safetensors'))) steps.push(Number(m[1]));
  }
  return steps.sort((a, b) => a - b);
}

function mean(xs: number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}

function meanMetrics(rows: Record<string, number>[]): Record<string, number> {
  const keys = new Set(rows.flatMap((r) => Object.keys(r)));
  return Object.fromEntries([...keys].map((k) => [k, mean(rows.filter((r) => k in r).map((r) => r[k]))]));
}

function numbersOf(row: Record<string, unknown>): Record<string, number> {
  return Object.fromEntries(Object.entries(row).filter((e): e is [string, number] => typeof e[1] === 'number'));
}
