/**
 * `mcprl backend`: one process owns the engine (a LocalBackend under its folder) and serves, over HTTP,
 *
 *   POST /backend/register            {settings}                 → ModelEndpoint
 *   POST /backend/train               {model, groups, config?}   → TrainResult (or NDJSON progress, then it)
 *   POST /backend/sft                 {model, trajectories, config?} → TrainResult (or NDJSON progress, then it)
 *   POST /backend/checkpoints         {model}                    → {checkpoints: Checkpoint[]}
 *   POST /backend/delete-checkpoints  {model, options?}          → {deleted: number[]}
 *   POST /backend/export              {model, options?}          → ExportResult (written under the folder)
 *   POST /backend/delete              {model}                    → {}
 *   GET  /v1/models, POST /v1/chat/completions                   every registered model's newest adapter
 *   GET  /health                                                 (no token needed)
 *
 * where `model` is `{project, name}`. Bodies are JSON, checked by the library's schemas (errors name the field),
 * and bounded in size. Every request passes the local servers' guard first (src/util/http-guard.ts: Host, Origin,
 * JSON bodies); with a token, every route but /health wants `Authorization: Bearer <token>`; a server bound beyond
 * loopback refuses to start without one. The folder is one server's: it holds the folder's lock (`DIR/lock`) from
 * start to close, and a second server on the folder refuses at start, naming the holder.
 *
 * train and sft stream when the request accepts `application/x-ndjson`: one StepStreamLine per line, progress
 * events while the step runs, then its result (or its error). A request refused before the step begins (a bad
 * body, an unknown model) is answered as plain JSON with its status either way.
 *
 * A client that goes away during a step does not stop it: the step completes, its checkpoint is written whole and
 * served, and the lines meant for the client are dropped. The next call for the model (register included) waits
 * for that step, so it sees the model at a step with a complete checkpoint.
 */
import { mkdir } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { ChatRequestError } from '../serve/openai-chat.js';
import { chatRequestListener, readJson } from '../serve/server.js';
import { DirLock } from '../util/dir-lock.js';
import { checkBind, checkToken, createHttpGuard } from '../util/http-guard.js';
import { listenHttp } from '../util/http-listen.js';
import { BackendError, parseInput } from './errors.js';
import type { Device } from '../engine/device.js';
import { LocalBackend, type LocalBackendOptions } from './local-backend.js';
import type { StepCallOptions } from './backend.js';
import type { StepStreamLine, DeleteCheckpointsInput, ExportOptionsInput, SftConfigInput, SftTrajectoryInput, TrainableModelSettingsInput, TrainStepConfigInput, TrajectoryGroupInput } from './schemas.js';
import { ModelKeySchema } from './schemas.js';

export interface BackendServerOptions {
  /** Folder everything is written under. */
  dir: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8100; 0 picks a free port. */
  port?: number;
  /** Bearer token every request must carry (but /health). Required when `host` is not a loopback address. */
  token?: string;
  /** Host names the Host header may carry besides the loopback names and `host` (see src/util/http-guard.ts). */
  allowedHosts?: readonly string[];
  /** Browser origins allowed besides the server's own. Default none. */
  allowedOrigins?: readonly string[];
  /** Engine threads. Default: the engine's. */
  threads?: number;
  /** Where the engines run (src/engine/device.ts). Default auto. */
  device?: Device;
  /** Largest request body, in bytes. Default 256 MiB (a step's groups with their token ids). */
  maxBodyBytes?: number;
  /** Receives one line per request. Default: none. */
  log?: (line: string) => void;
  /** Called as a hub model's files download when a model registers (LocalBackendOptions.onDownload). Default: none. */
  onDownload?: LocalBackendOptions['onDownload'];
}

export interface RunningBackendServer {
  /** Base URL, e.g. `http://127.0.0.1:8100`; the OpenAI-compatible API is under `/v1`. */
  url: string;
  port: number;
  backend: LocalBackend;
  close(): Promise<void>;
}

const RegisterBodySchema = z.object({ settings: z.unknown() });
const TrainBodySchema = z.object({ model: ModelKeySchema, groups: z.unknown(), config: z.unknown().optional() });
const SftBodySchema = z.object({ model: ModelKeySchema, trajectories: z.unknown(), config: z.unknown().optional() });
const ModelBodySchema = z.object({ model: ModelKeySchema, options: z.unknown().optional() });

export async function startBackendServer(opts: BackendServerOptions): Promise<RunningBackendServer> {
  const host = opts.host ?? '127.0.0.1';
  await checkBind(host, opts.token === undefined ? undefined : checkToken(opts.token), 'mcprl backend');
  // The folder is this server's alone (as a run folder is `mcprl train`'s): a second server on it refuses here,
  // naming the first, instead of both writing the same models' steps. Taken after the bind is checked, so that a
  // refused start makes no folder.
  await mkdir(opts.dir, { recursive: true });
  const lock = DirLock.acquire(opts.dir, 'mcprl backend process');
  try {
    return await listen(opts, host, lock);
  } catch (err) {
    lock.release();
    throw err;
  }
}

async function listen(opts: BackendServerOptions, host: string, lock: DirLock): Promise<RunningBackendServer> {
  // Host, Origin, token and JSON bodies, before any route (src/util/http-guard.ts); /health needs no token.
  const guard = createHttpGuard({
    host,
    open: ['/health'],
    ...(opts.token !== undefined ? { token: opts.token } : {}),
    ...(opts.allowedHosts ? { allowedHosts: opts.allowedHosts } : {}),
    ...(opts.allowedOrigins ? { allowedOrigins: opts.allowedOrigins } : {}),
  });
  const maxBody = opts.maxBodyBytes ?? 256 * 1024 * 1024;
  let backend: LocalBackend | null = null;
  const chat = chatRequestListener(() => backend?.chatEngines() ?? [], opts.log ? { log: opts.log } : {});
  const server: Server = createServer((req, res) => {
    const t0 = Date.now();
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (opts.log && !path.startsWith('/v1/')) res.on('finish', () => opts.log?.(`${req.method} ${path} ${res.statusCode} ${Date.now() - t0}ms`));
    const refused = guard.check(req);
    if (refused) {
      // The body is left unread: the connection closes with the answer.
      res.setHeader('connection', 'close');
      return sendJson(res, refused.status, { error: { message: refused.message, code: refused.code, field: null } });
    }
    if (!path.startsWith('/backend/')) return chat(req, res);
    if (!backend) return sendJson(res, 503, { error: { message: 'starting', code: 'starting', field: null } });
    const stream = /application\/x-ndjson/.test(req.headers.accept ?? '') ? new StepStream(res, opts.log) : null;
    route(backend, path, req, maxBody, stream ? { onProgress: (event) => stream.write({ type: 'progress', event }) } : {}).then(
      (body) => (stream?.started ? stream.end({ type: 'result', result: body as never }) : sendJson(res, 200, body)),
      (err: unknown) => (stream?.started ? stream.end({ type: 'error', error: errorOf(err).body.error }) : sendError(res, err)),
    );
  });
  const listening = await listenHttp(server, opts.port ?? 8100, host);
  const { port, origin: url } = listening;
  backend = new LocalBackend({
    dir: opts.dir,
    ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
    ...(opts.device !== undefined ? { device: opts.device } : {}),
    ...(opts.onDownload ? { onDownload: opts.onDownload } : {}),
    endpoint: { baseURL: `${url}/v1`, apiKey: opts.token ?? 'mcprl-local' },
  });
  const running = backend;
  return {
    url,
    port,
    backend: running,
    close: async () => {
      await listening.close();
      await running.close();
      lock.release();
    },
  };
}

async function route(backend: LocalBackend, path: string, req: IncomingMessage, maxBody: number, step: StepCallOptions): Promise<unknown> {
  if (req.method !== 'POST') throw new BackendError('BACKEND_INVALID', `${req.method} ${path}: use POST`, { status: 405 });
  const body = await readJson(req, maxBody);
  // Only the envelope is checked here: LocalBackend checks settings, groups and options with the library's schemas.
  switch (path) {
    case '/backend/register': {
      const { settings } = parseInput(RegisterBodySchema, body, 'body');
      return backend.register(settings as TrainableModelSettingsInput);
    }
    case '/backend/train': {
      const b = parseInput(TrainBodySchema, body, 'body');
      return backend.train(b.model, b.groups as TrajectoryGroupInput[], (b.config ?? {}) as TrainStepConfigInput, step);
    }
    case '/backend/sft': {
      const b = parseInput(SftBodySchema, body, 'body');
      return backend.sft(b.model, b.trajectories as SftTrajectoryInput[], (b.config ?? {}) as SftConfigInput, step);
    }
    case '/backend/checkpoints': {
      const b = parseInput(ModelBodySchema, body, 'body');
      return { checkpoints: await backend.checkpoints(b.model) };
    }
    case '/backend/delete-checkpoints': {
      const b = parseInput(ModelBodySchema, body, 'body');
      return { deleted: await backend.deleteCheckpoints(b.model, (b.options ?? {}) as DeleteCheckpointsInput) };
    }
    case '/backend/export': {
      const b = parseInput(ModelBodySchema, body, 'body');
      return backend.export(b.model, (b.options ?? {}) as ExportOptionsInput);
    }
    case '/backend/delete': {
      const b = parseInput(ModelBodySchema, body, 'body');
      await backend.delete(b.model);
      return {};
    }
    default:
      throw new BackendError('BACKEND_INVALID', `no route POST ${path}`, { status: 404 });
  }
}

/**
 * A step's answer as NDJSON lines. The headers go out with the first line, so a request refused before its step
 * begins is still answered with its status. Once the client has gone, lines are dropped: the step runs on.
 */
class StepStream {
  started = false;
  private gone = false;

  constructor(private readonly res: ServerResponse, private readonly log?: (line: string) => void) {
    // A write racing the client's disconnect reports an error on the response; the step must not see it.
    res.on('error', () => undefined);
    res.on('close', () => {
      if (!res.writableFinished) {
        this.gone = true;
        this.log?.('client went away during a step; the step completes and its checkpoint is written');
      }
    });
  }

  write(line: StepStreamLine): void {
    if (!this.started) {
      this.started = true;
      this.res.writeHead(200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'cache-control': 'no-cache' });
    }
    if (!this.gone && !this.res.destroyed) this.res.write(JSON.stringify(line) + '\n');
  }

  end(line: StepStreamLine): void {
    this.write(line);
    if (!this.res.destroyed) this.res.end();
  }
}

function errorOf(err: unknown): { status: number; body: { error: { message: string; code: string; field: string | null } } } {
  if (err instanceof BackendError) return { status: err.status, body: { error: { message: err.message, code: err.code, field: err.field } } };
  if (err instanceof ChatRequestError) return { status: err.status, body: { error: { message: err.message, code: 'BACKEND_INVALID', field: err.param ?? null } } };
  const code = typeof (err as { code?: unknown }).code === 'string' ? (err as { code: string }).code : 'INTERNAL';
  return { status: 500, body: { error: { message: err instanceof Error ? err.message : String(err), code, field: null } } };
}

function sendError(res: ServerResponse, err: unknown): void {
  const { status, body } = errorOf(err);
  sendJson(res, status, body);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
