/**
 * A backend: where a trainable model's inference and training run. LocalBackend runs the engine in this
 * process; RemoteBackend talks to `mcprl backend` on another machine. TrainableModel sees only this interface,
 * so application code is the same with either.
 */
import type {
  Checkpoint,
  DeleteCheckpointsInput,
  ExportOptionsInput,
  ExportResult,
  ModelEndpoint,
  ModelKey,
  SftConfigInput,
  SftTrajectoryInput,
  TrainableModelSettingsInput,
  TrainResult,
  TrainStepConfigInput,
  TrajectoryGroupInput,
} from './schemas.js';
import type { ProgressListener } from '../util/progress.js';

/** How a caller follows (and stops waiting for) one train() or sft() call. Not data: no schema. */
export interface StepCallOptions {
  /**
   * Receives the step's progress events as it runs: score (groups), train (sequences), checkpoint; each phase
   * starts with done = 0. Default none.
   */
  onProgress?: ProgressListener;
  /**
   * Stops waiting for the answer (RemoteBackend: the request is aborted, BACKEND_ABORTED). The step itself is not
   * cancelled: a server finishes it and writes its checkpoint. Default none.
   */
  signal?: AbortSignal;
}

/** Names a registered model. */
export type { ModelKey };

export interface Backend {
  /**
   * Loads the model (resuming from its newest checkpoint, or a fresh adapter: step 0) and serves it; resolves
   * with where its OpenAI-compatible endpoint is. Registering again with the same settings is harmless; it waits
   * for a step in flight, so the step it reports always has its checkpoint.
   */
  register(settings: TrainableModelSettingsInput): Promise<ModelEndpoint>;
  /**
   * One GRPO step on the groups. New inference requests for the model wait from the moment this is called
   * until the new adapter serves; requests in flight finish on the adapter they began with.
   */
  train(model: ModelKey, groups: readonly TrajectoryGroupInput[], config?: TrainStepConfigInput, opts?: StepCallOptions): Promise<TrainResult>;
  /** One supervised step on the trajectories' assistant turns (held inference and checkpoints as for train). */
  sft(model: ModelKey, trajectories: readonly SftTrajectoryInput[], config?: SftConfigInput, opts?: StepCallOptions): Promise<TrainResult>;
  /** The model's checkpoints, oldest first. */
  checkpoints(model: ModelKey): Promise<Checkpoint[]>;
  /** Deletes every checkpoint but the latest and the best; resolves with the steps deleted. */
  deleteCheckpoints(model: ModelKey, opts?: DeleteCheckpointsInput): Promise<number[]>;
  /** Writes one checkpoint (default the latest) as a PEFT adapter, a merged model or ONNX, under the backend's folder. */
  export(model: ModelKey, opts?: ExportOptionsInput): Promise<ExportResult>;
  /** Stops serving the model and deletes everything the backend keeps of it. */
  delete(model: ModelKey): Promise<void>;
  /** Releases what the backend holds (a local engine, a server); its models can no longer be used. */
  close(): Promise<void>;
}
