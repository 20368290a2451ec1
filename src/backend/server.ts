/**
 * `mcprl backend`: one process owns the engine (a LocalBackend under its folder) and serves, over HTTP,
 *
 *   POST /backend/register            {settings}                 → ModelEndpoint
 *   POST /backend/train               {model, groups, config?}   → TrainResult
 *   POST /backend/sft                 {model, trajectories, config?} → TrainResult
 *   POST /backend/checkpoints         {model}                    → {checkpoints: Checkpoint[]}
 *   POST /backend/delete-checkpoints  {model, options?}          → {deleted: number[]}
 *   POST /backend/export              {model, options?}          → ExportResult (written under the folder)
 *   POST /backend/delete              {model}                    → {}
 *   GET  /v1/models, POST /v1/chat/completions                   every registered model's newest adapter
 *   GET  /health                                                 (no token needed)
 *
 * where `model` is `{project, name}`. Bodies are JSON, checked by the library's schemas (errors name the field),
 * and bounded in size. With a token, every route but /health wants `Authorization: Bearer <token>`; a server
 * bound beyond loopback refuses to start without one. A client that goes away during a train step does not stop
 * it: the step completes and its checkpoint is written, so the run stays whole.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { ChatRequestError } from '../serve/openai-chat.js';
import { chatRequestListener, readJson } from '../serve/server.js';
import { BackendError, parseInput } from './errors.js';
import { LocalBackend } from './local-backend.js';
import type { DeleteCheckpointsInput, ExportOptionsInput, SftConfigInput, SftTrajectoryInput, TrainableModelSettingsInput, TrainStepConfigInput, TrajectoryGroupInput } from './schemas.js';

export interface BackendServerOptions {
  /** Folder everything is written under. */
  dir: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8100; 0 picks a free port. */
  port?: number;
  /** Bearer token every request must carry (but /health). Required when `host` is not a loopback address. */
  token?: string;
  /** Engine threads. Default: the engine's. */
  threads?: number;
  /** Largest request body, in bytes. Default 256 MiB (a step's groups with their token ids). */
  maxBodyBytes?: number;
  /** Receives one line per request. Default: none. */
  log?: (line: string) => void;
}

export interface RunningBackendServer {
  /** Base URL, e.g. `http://127.0.0.1:8100`; the OpenAI-compatible API is under `/v1`. */
  url: string;
  port: number;
  backend: LocalBackend;
  close(): Promise<void>;
}

const ModelKeySchema = z.object({ project: z.string().min(1), name: z.string().min(1) });
const RegisterBodySchema = z.object({ settings: z.unknown() });
const TrainBodySchema = z.object({ model: ModelKeySchema, groups: z.unknown(), config: z.unknown().optional() });
const SftBodySchema = z.object({ model: ModelKeySchema, trajectories: z.unknown(), config: z.unknown().optional() });
const ModelBodySchema = z.object({ model: ModelKeySchema, options: z.unknown().optional() });

/** True for addresses only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

export async function startBackendServer(opts: BackendServerOptions): Promise<RunningBackendServer> {
  const host = opts.host ?? '127.0.0.1';
  if (!isLoopback(host) && !opts.token) {
    throw new BackendError('BACKEND_INVALID', `refusing to listen on ${host} without a token: pass --token (or bind to 127.0.0.1)`, { field: 'token' });
  }
  const maxBody = opts.maxBodyBytes ?? 256 * 1024 * 1024;
  let backend: LocalBackend | null = null;
  const chat = chatRequestListener(() => backend?.chatEngines() ?? [], opts.log ? { log: opts.log } : {});
  const server: Server = createServer((req, res) => {
    const t0 = Date.now();
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (opts.log && !path.startsWith('/v1/')) res.on('finish', () => opts.log?.(`${req.method} ${path} ${res.statusCode} ${Date.now() - t0}ms`));
    if (path !== '/health' && !authorized(req, opts.token)) {
      return sendJson(res, 401, { error: { message: 'missing or wrong bearer token', code: 'unauthorized', field: null } });
    }
    if (!path.startsWith('/backend/')) return chat(req, res);
    if (!backend) return sendJson(res, 503, { error: { message: 'starting', code: 'starting', field: null } });
    route(backend, path, req, maxBody).then(
      (body) => sendJson(res, 200, body),
      (err: unknown) => sendError(res, err),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 8100, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  backend = new LocalBackend({
    dir: opts.dir,
    ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
    endpoint: { baseURL: `${url}/v1`, apiKey: opts.token ?? 'mcprl-local' },
  });
  const running = backend;
  return {
    url,
    port,
    backend: running,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await running.close();
    },
  };
}

async function route(backend: LocalBackend, path: string, req: IncomingMessage, maxBody: number): Promise<unknown> {
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
      return backend.train(b.model, b.groups as TrajectoryGroupInput[], (b.config ?? {}) as TrainStepConfigInput);
    }
    case '/backend/sft': {
      const b = parseInput(SftBodySchema, body, 'body');
      return backend.sft(b.model, b.trajectories as SftTrajectoryInput[], (b.config ?? {}) as SftConfigInput);
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

function authorized(req: IncomingMessage, token: string | undefined): boolean {
  if (!token) return true;
  const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
  // Hashing first gives equal lengths, as timingSafeEqual needs.
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(given), h(token));
}

function sendError(res: ServerResponse, err: unknown): void {
  if (err instanceof BackendError) return sendJson(res, err.status, { error: { message: err.message, code: err.code, field: err.field } });
  if (err instanceof ChatRequestError) return sendJson(res, err.status, { error: { message: err.message, code: 'BACKEND_INVALID', field: err.param } });
  const code = typeof (err as { code?: unknown }).code === 'string' ? (err as { code: string }).code : 'INTERNAL';
  sendJson(res, 500, { error: { message: err instanceof Error ? err.message : String(err), code, field: null } });
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
