/**
 * A backend on another machine: `mcprl backend` (src/backend/server.ts), reached over HTTP. The same Backend
 * interface as LocalBackend, so a TrainableModel is used the same way with either; the model's OpenAI-compatible
 * endpoint is the server's `/v1`, with the server's token as the API key.
 */
import { z } from 'zod';
import type { Backend, ModelKey } from './backend.js';
import { BackendError, type BackendErrorCode } from './errors.js';
import {
  CheckpointSchema,
  ExportResultSchema,
  ModelEndpointSchema,
  TrainResultSchema,
  type Checkpoint,
  type DeleteCheckpointsInput,
  type ExportOptionsInput,
  type ExportResult,
  type ModelEndpoint,
  type SftConfigInput,
  type SftTrajectoryInput,
  type TrainableModelSettingsInput,
  type TrainResult,
  type TrainStepConfigInput,
  type TrajectoryGroupInput,
} from './schemas.js';

const CODES: readonly BackendErrorCode[] = ['BACKEND_INVALID', 'BACKEND_NOT_REGISTERED', 'BACKEND_CONFLICT', 'BACKEND_STATE'];

export class RemoteBackend implements Backend {
  private readonly url: string;

  /** `url`: the server's base URL (e.g. `http://gpu-box:8100`); `token`: its bearer token, when it has one. */
  constructor(url: string, private readonly token?: string) {
    this.url = url.replace(/\/+$/, '');
  }

  async register(settings: TrainableModelSettingsInput): Promise<ModelEndpoint> {
    const endpoint = await this.post('/backend/register', { settings }, ModelEndpointSchema);
    // The server's own idea of its address may not be the one this client reaches it by.
    return { ...endpoint, baseURL: `${this.url}/v1`, apiKey: this.token ?? endpoint.apiKey };
  }

  async train(model: ModelKey, groups: readonly TrajectoryGroupInput[], config: TrainStepConfigInput = {}): Promise<TrainResult> {
    return this.post('/backend/train', { model: key(model), groups, config }, TrainResultSchema);
  }

  async sft(model: ModelKey, trajectories: readonly SftTrajectoryInput[], config: SftConfigInput = {}): Promise<TrainResult> {
    return this.post('/backend/sft', { model: key(model), trajectories, config }, TrainResultSchema);
  }

  async checkpoints(model: ModelKey): Promise<Checkpoint[]> {
    return (await this.post('/backend/checkpoints', { model: key(model) }, z.object({ checkpoints: z.array(CheckpointSchema) }))).checkpoints;
  }

  async deleteCheckpoints(model: ModelKey, options: DeleteCheckpointsInput = {}): Promise<number[]> {
    return (await this.post('/backend/delete-checkpoints', { model: key(model), options }, z.object({ deleted: z.array(z.number()) }))).deleted;
  }

  async export(model: ModelKey, options: ExportOptionsInput = {}): Promise<ExportResult> {
    return this.post('/backend/export', { model: key(model), options }, ExportResultSchema);
  }

  async delete(model: ModelKey): Promise<void> {
    await this.post('/backend/delete', { model: key(model) }, z.object({}));
  }

  /** Nothing to release here: the server keeps its models. */
  async close(): Promise<void> {}

  /** POSTs `body` and checks the answer against `reply` (BACKEND_HTTP when it does not fit). */
  private async post<S extends z.ZodType>(path: string, body: unknown, reply: S): Promise<z.output<S>> {
    let res: Response;
    try {
      res = await fetch(`${this.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.token ? { authorization: `Bearer ${this.token}` } : {}) },
        body: JSON.stringify(body),
      });
    } catch (err) {
      throw new BackendError('BACKEND_UNREACHABLE', `${this.url}${path}: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new BackendError('BACKEND_HTTP', `${this.url}${path}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`, { status: res.status });
    }
    if (!res.ok) {
      const e = (json as { error?: { message?: string; code?: string; field?: string | null } }).error ?? {};
      const code = CODES.find((c) => c === e.code) ?? 'BACKEND_HTTP';
      throw new BackendError(code, `${path}: ${e.message ?? `HTTP ${res.status}`}`, { field: e.field ?? null, status: res.status });
    }
    const parsed = reply.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new BackendError('BACKEND_HTTP', `${this.url}${path}: unexpected answer: ${issue.path.join('.')}: ${issue.message}`, { status: res.status });
    }
    return parsed.data;
  }
}

function key(m: ModelKey): ModelKey {
  return { project: m.project, name: m.name };
}
