/**
 * A model the application trains: a base model plus a LoRA adapter, registered with a backend that serves its
 * newest adapter behind an OpenAI-compatible endpoint and trains it on groups of scored trajectories.
 *
 *   const model = new TrainableModel({ project: 'games', name: 'ttt', baseModel: 'Qwen/Qwen3-4B' }); // or a folder
 *   await model.register(new LocalBackend({ dir: '.mcprl' }));
 *   const client = model.openai();          // the application's own agent code uses this
 *   … gather groups, assign rewards …
 *   const result = await model.train(groups, { lr: 1e-4 });
 */
import OpenAI, { type ClientOptions } from 'openai';
import type { Backend, StepCallOptions } from './backend.js';
import { BackendError, parseInput } from './errors.js';
import {
  TrainableModelSettingsSchema,
  type Checkpoint,
  type DeleteCheckpointsInput,
  type ExportOptionsInput,
  type ExportResult,
  type ModelEndpoint,
  type SftConfigInput,
  type SftTrajectoryInput,
  type TrainableModelSettings,
  type TrainableModelSettingsInput,
  type TrainResult,
  type TrainStepConfigInput,
  type TrajectoryGroupInput,
} from './schemas.js';

export class TrainableModel {
  readonly settings: TrainableModelSettings;
  private backend: Backend | null = null;
  private endpoint: ModelEndpoint | null = null;

  constructor(settings: TrainableModelSettingsInput) {
    this.settings = parseInput(TrainableModelSettingsSchema, settings, 'settings');
  }

  get project(): string {
    return this.settings.project;
  }

  get name(): string {
    return this.settings.name;
  }

  /** Registers with `backend`, which loads the model (resuming from its newest checkpoint) and serves it. */
  async register(backend: Backend): Promise<void> {
    this.endpoint = await backend.register(this.settings);
    this.backend = backend;
  }

  /** OpenAI-compatible base URL serving this model's newest adapter. */
  get baseURL(): string {
    return this.registered().endpoint.baseURL;
  }

  /** The `model` field to send to `baseURL`. */
  get inferenceName(): string {
    return this.registered().endpoint.inferenceName;
  }

  /** The API key `baseURL` wants. */
  get apiKey(): string {
    return this.registered().endpoint.apiKey;
  }

  /** Training steps taken so far (0: the fresh adapter, which behaves as the base model). */
  get step(): number {
    return this.registered().endpoint.step;
  }

  /** An `openai` client for this model's endpoint; `opts` are passed on (e.g. a recorder's `fetch`). */
  openai(opts: Omit<ClientOptions, 'baseURL' | 'apiKey'> = {}): OpenAI {
    return new OpenAI({ baseURL: this.baseURL, apiKey: this.apiKey, ...opts });
  }

  /**
   * One training step on `groups` (each: attempts at one task, with rewards). Inference for this model is held
   * from this call until the new adapter serves. `opts.onProgress` receives the step's progress events (score,
   * train, checkpoint) as it runs, locally or on a server; `opts.signal` stops waiting (a server finishes the step).
   */
  async train(groups: readonly TrajectoryGroupInput[], config: TrainStepConfigInput = {}, opts: StepCallOptions = {}): Promise<TrainResult> {
    const { backend, endpoint } = this.registered();
    const result = await backend.train(this.key(), groups, config, opts);
    endpoint.step = result.step;
    return result;
  }

  /**
   * One supervised step: cross-entropy on the assistant turns of `trajectories` (rewards, if any, are not used),
   * for warm-up or to distil a stronger model's conversations. Counts as a step, with its checkpoint.
   */
  async sft(trajectories: readonly SftTrajectoryInput[], config: SftConfigInput = {}, opts: StepCallOptions = {}): Promise<TrainResult> {
    const { backend, endpoint } = this.registered();
    const result = await backend.sft(this.key(), trajectories, config, opts);
    endpoint.step = result.step;
    return result;
  }

  /** The saved steps, oldest first. */
  async checkpoints(): Promise<Checkpoint[]> {
    return this.registered().backend.checkpoints(this.key());
  }

  /** Deletes every checkpoint but the latest and the best (by `metric`, default the step's mean reward). */
  async deleteCheckpoints(opts: DeleteCheckpointsInput = {}): Promise<number[]> {
    return this.registered().backend.deleteCheckpoints(this.key(), opts);
  }

  /**
   * Writes a checkpoint (default the latest) as a PEFT adapter (vLLM / HF loadable), a merged model, or ONNX,
   * under the backend's folder (`<project>/<name>/exports/`); resolves with the folder.
   */
  async export(opts: ExportOptionsInput = {}): Promise<ExportResult> {
    return this.registered().backend.export(this.key(), opts);
  }

  /** Stops serving the model and deletes everything the backend keeps of it; the object is unregistered. */
  async delete(): Promise<void> {
    const { backend } = this.registered();
    await backend.delete(this.key());
    this.backend = null;
    this.endpoint = null;
  }

  private key(): { project: string; name: string } {
    return { project: this.project, name: this.name };
  }

  private registered(): { backend: Backend; endpoint: ModelEndpoint } {
    if (!this.backend || !this.endpoint) {
      throw new BackendError('BACKEND_STATE', `model ${this.project}/${this.name} is not registered with a backend: call register(backend) first`);
    }
    return { backend: this.backend, endpoint: this.endpoint };
  }
}
