/**
 * A backend on another machine: `mcprl backend` (src/backend/server.ts), reached over HTTP. The same Backend
 * interface as LocalBackend, so a TrainableModel is used the same way with either; the model's OpenAI-compatible
 * endpoint is the server's `/v1`, with the server's token as the API key.
 *
 * train() and sft() ask for the streamed answer (NDJSON, StepStreamLineSchema), so the step's progress events
 * reach `onProgress` while it runs on the server.
 */
import { z } from 'zod';
import type { Backend, ModelKey, StepCallOptions } from './backend.js';
import { BackendError, type BackendErrorCode } from './errors.js';
import {
  CheckpointSchema,
  ExportResultSchema,
  ModelEndpointSchema,
  StepStreamLineSchema,
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

type WireError = { message?: string; code?: string; field?: string | null };

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

  async train(model: ModelKey, groups: readonly TrajectoryGroupInput[], config: TrainStepConfigInput = {}, opts: StepCallOptions = {}): Promise<TrainResult> {
    return this.postStep('/backend/train', { model: key(model), groups, config }, opts);
  }

  async sft(model: ModelKey, trajectories: readonly SftTrajectoryInput[], config: SftConfigInput = {}, opts: StepCallOptions = {}): Promise<TrainResult> {
    return this.postStep('/backend/sft', { model: key(model), trajectories, config }, opts);
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

  /**
   * POSTs a step and reads its NDJSON answer line by line: progress to `opts.onProgress`, then the result. A
   * request refused before the step began comes back as plain JSON (its status says why).
   */
  private async postStep(path: string, body: unknown, opts: StepCallOptions): Promise<TrainResult> {
    const res = await this.send(path, body, { accept: 'application/x-ndjson, application/json', signal: opts.signal });
    if (!/application\/x-ndjson/.test(res.headers.get('content-type') ?? '')) return this.answer(path, res, TrainResultSchema, opts.signal);
    try {
      for await (const text of lines(res)) {
        // Lines that arrived with the one the caller aborted on are not delivered.
        if (opts.signal?.aborted) throw opts.signal.reason;
        const parsed = StepStreamLineSchema.safeParse(JSON.parse(text));
        if (!parsed.success) {
          const issue = parsed.error.issues[0];
          throw new BackendError('BACKEND_HTTP', `${this.url}${path}: unexpected line: ${issue.path.join('.')}: ${issue.message}`, { status: res.status });
        }
        const line = parsed.data;
        if (line.type === 'progress') opts.onProgress?.(line.event);
        else if (line.type === 'result') return line.result;
        else throw this.failure(path, line.error, 500);
      }
    } catch (err) {
      throw this.transportError(path, err, opts.signal);
    }
    throw new BackendError('BACKEND_HTTP', `${this.url}${path}: the answer ended before the step's result`, { status: res.status });
  }

  /** POSTs `body` and checks the answer against `reply` (BACKEND_HTTP when it does not fit). */
  private async post<S extends z.ZodType>(path: string, body: unknown, reply: S): Promise<z.output<S>> {
    return this.answer(path, await this.send(path, body, {}), reply);
  }

  private async send(path: string, body: unknown, o: { accept?: string; signal?: AbortSignal | undefined }): Promise<Response> {
    try {
      return await fetch(`${this.url}${path}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(o.accept ? { accept: o.accept } : {}),
          ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        },
        body: JSON.stringify(body),
        ...(o.signal ? { signal: o.signal } : {}),
      });
    } catch (err) {
      throw this.transportError(path, err, o.signal);
    }
  }

  /** BACKEND_ABORTED when the caller's signal stopped the request, else BACKEND_UNREACHABLE (BackendErrors pass). */
  private transportError(path: string, err: unknown, signal: AbortSignal | undefined): BackendError {
    if (err instanceof BackendError) return err;
    if (signal?.aborted) return new BackendError('BACKEND_ABORTED', `${this.url}${path}: aborted by the caller; a step already begun completes on the server`, { cause: err });
    return new BackendError('BACKEND_UNREACHABLE', `${this.url}${path}: ${(err as Error).message}`, { cause: err });
  }

  private failure(path: string, e: WireError, status: number): BackendError {
    const code = CODES.find((c) => c === e.code) ?? 'BACKEND_HTTP';
    return new BackendError(code, `${path}: ${e.message ?? `HTTP ${status}`}`, { field: e.field ?? null, status });
  }

  /** Reads a JSON answer: the error it holds, or the value checked against `reply`. */
  private async answer<S extends z.ZodType>(path: string, res: Response, reply: S, signal?: AbortSignal): Promise<z.output<S>> {
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      throw this.transportError(path, err, signal);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new BackendError('BACKEND_HTTP', `${this.url}${path}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`, { status: res.status });
    }
    if (!res.ok) throw this.failure(path, (json as { error?: WireError }).error ?? {}, res.status);
    const parsed = reply.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new BackendError('BACKEND_HTTP', `${this.url}${path}: unexpected answer: ${issue.path.join('.')}: ${issue.message}`, { status: res.status });
    }
    return parsed.data;
  }
}

/** The non-empty lines of a response body, as they arrive. */
async function* lines(res: Response): AsyncGenerator<string> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of res.body) {
    buffered += decoder.decode(chunk as Uint8Array, { stream: true });
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (line) yield line;
    }
  }
  buffered += decoder.decode();
  if (buffered.trim()) yield buffered.trim();
}

function key(m: ModelKey): ModelKey {
  return { project: m.project, name: m.name };
}
