/**
 * `mcprl serve`'s HTTP face: an OpenAI-compatible chat-completions API on node:http over a ChatEngine.
 *
 * Routes: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions` (JSON or SSE stream),
 * `GET /health`. Errors use OpenAI's `{"error": {message, type, param, code}}` shape. Every choice carries
 * `mcprl_token_ids`, the exact sampled ids, so training can use a served turn without re-tokenising, and a
 * completion names the adapter that generated it in `mcprl_adapter` (null: the base model).
 *
 * One server may front several engines (one per base model, as the library's backends have): a request goes to
 * the engine that serves its `model` name, and `/v1/models` lists them all.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ChatChoice, ChatEngine, ChatResult, ChatTurnRequest } from '../chat/chat-engine.js';
import { ChatRequestError, parseChatRequest, tokenLogprobs, toRequestError, toTurnRequest } from './openai-chat.js';

export interface ServerOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8000; 0 picks a free port. */
  port?: number;
  /**
   * Largest request body accepted, in bytes. Default: what a prompt that fits the model's context can take as
   * JSON (maxPromptChars × 6 bytes, a \uXXXX escape per character at worst, plus 1 MiB), at most 32 MiB.
   */
  maxBodyBytes?: number;
  /** Receives one line per request (method, path, status, milliseconds). Default: none. */
  log?: (line: string) => void;
}

export interface RunningServer {
  server: Server;
  /** Base URL of the API, e.g. `http://127.0.0.1:8000/v1`. */
  url: string;
  port: number;
  close(): Promise<void>;
}

/** The engines a server fronts: one, or a function giving the current list (engines may come and go). */
export type ChatEngines = ChatEngine | (() => readonly ChatEngine[]);

/** Starts serving `engine`; resolves once the port is bound. */
export async function startServer(engine: ChatEngines, opts: ServerOptions = {}): Promise<RunningServer> {
  const server = createChatServer(engine, opts);
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 8000, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    server,
    url: `http://${shownHost}:${port}/v1`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The request handler as a node:http server (not yet listening). */
export function createChatServer(engine: ChatEngines, opts: ServerOptions = {}): Server {
  return createServer(chatRequestListener(engine, opts));
}

/** The request handler alone, for a server that mounts it beside routes of its own (`mcprl backend`). */
export function chatRequestListener(engine: ChatEngines, opts: ServerOptions = {}): RequestListener {
  // One model: the cap follows its context (see maxBodyBytes). Several (a backend's, which change): 32 MiB.
  const maxBody = opts.maxBodyBytes ?? (typeof engine === 'function' ? 32 * 1024 * 1024 : Math.min(32 * 1024 * 1024, 6 * engine.maxPromptChars + 1024 * 1024));
  const created = Math.floor(Date.now() / 1000);
  const engines = typeof engine === 'function' ? engine : () => [engine];
  return (req, res) => {
    const t0 = Date.now();
    res.on('finish', () => opts.log?.(`${req.method} ${req.url} ${res.statusCode} ${Date.now() - t0}ms`));
    handle(engines, req, res, maxBody, created).catch((err) => {
      // Last line of defence: nothing a request does may take the server down.
      sendError(res, err instanceof ChatRequestError ? err : internalError(err));
    });
  };
}

/** The engine serving `model`: the one that lists the name, else the first (which answers model_not_found). */
function engineFor(engines: readonly ChatEngine[], model: unknown): ChatEngine {
  const hit = engines.find((e) => e.modelNames().some((m) => m.id === model));
  if (hit) return hit;
  if (engines.length === 0) throw new ChatRequestError(404, `The model \`${String(model)}\` does not exist`, { param: 'model', code: 'model_not_found' });
  return engines[0];
}

async function handle(
  engines: () => readonly ChatEngine[],
  req: IncomingMessage,
  res: ServerResponse,
  maxBody: number,
  created: number,
): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '') || '/';
  const method = req.method ?? 'GET';

  if (path === '/health' && method === 'GET') return sendJson(res, 200, { status: 'ok' });

  if (path === '/v1/models' || path.startsWith('/v1/models/')) {
    if (method !== 'GET') throw methodNotAllowed(method, path);
    const list = engines().flatMap((engine) =>
      engine.modelNames().map((m) => ({
        id: m.id,
        object: 'model',
        created,
        owned_by: 'mcprl',
        root: m.adapter === null ? engine.model.dir : (engine.adapterDirs.get(m.adapter) ?? m.adapter),
        parent: m.adapter === null ? null : engine.modelName,
      })),
    );
    if (path === '/v1/models') return sendJson(res, 200, { object: 'list', data: list });
    const id = decodeURIComponent(path.slice('/v1/models/'.length));
    const hit = list.find((m) => m.id === id);
    if (!hit) throw new ChatRequestError(404, `The model \`${id}\` does not exist`, { param: 'model', code: 'model_not_found' });
    return sendJson(res, 200, hit);
  }

  if (path === '/v1/chat/completions') {
    if (method !== 'POST') throw methodNotAllowed(method, path);
    const body = await readJson(req, maxBody);
    const engine = engineFor(engines(), body && typeof body === 'object' ? (body as { model?: unknown }).model : undefined);
    // The client going away (connection closed before the answer is complete) cancels generation.
    const controller = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) controller.abort(new Error('client disconnected'));
    });
    const stream = !!(body && typeof body === 'object' && (body as { stream?: unknown }).stream === true);
    const wantLogprobs = !!(body && typeof body === 'object' && (body as { logprobs?: unknown }).logprobs === true);
    const turn = toTurnRequest(parseChatRequest(body), controller.signal);
    if (!stream) {
      const result = await engine.complete(turn).catch((err: unknown) => {
        throw toRequestError(err);
      });
      return sendJson(res, 200, completionJson(engine, result, wantLogprobs));
    }
    return streamCompletion(engine, turn, body, res, controller.signal, wantLogprobs);
  }

  throw new ChatRequestError(404, `No route ${method} ${path}`, { code: 'not_found' });
}

function completionJson(engine: ChatEngine, r: ChatResult, wantLogprobs: boolean): Record<string, unknown> {
  return {
    id: `chatcmpl-${randomUUID()}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: r.model,
    system_fingerprint: null,
    mcprl_adapter: r.adapter,
    choices: r.choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant',
        content: c.content,
        refusal: null,
        ...(c.toolCalls.length > 0 ? { tool_calls: wireToolCalls(c) } : {}),
      },
      logprobs: wantLogprobs ? { content: logprobEntries(engine, c.tokenIds, c.logprobs), refusal: null } : null,
      finish_reason: c.finishReason,
      mcprl_token_ids: c.tokenIds,
      ...(c.invalidToolCalls.length > 0 ? { mcprl_invalid_tool_calls: c.invalidToolCalls } : {}),
    })),
    usage: usage(r),
  };
}

function usage(r: ChatResult) {
  const completionTokens = r.choices.reduce((s, c) => s + c.tokenIds.length, 0);
  const promptTokens = r.promptTokenIds.length;
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

function wireToolCalls(c: ChatChoice) {
  return c.toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } }));
}

function logprobEntries(engine: ChatEngine, ids: number[], lps: number[]) {
  return tokenLogprobs(engine.tokenizer, ids, lps).map((t) => ({ ...t, top_logprobs: [] }));
}

async function streamCompletion(
  engine: ChatEngine,
  turn: ChatTurnRequest,
  body: unknown,
  res: ServerResponse,
  signal: AbortSignal,
  wantLogprobs: boolean,
): Promise<void> {
  const events = engine.stream(turn);
  // The first step checks the request; a bad one is answered as plain JSON with its status code.
  let first = await events.next().catch((err: unknown) => {
    throw toRequestError(err);
  });
  const r = (body ?? {}) as { model?: string; n?: number; stream_options?: { include_usage?: boolean } };
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: r.model, system_fingerprint: null, choices, ...extra })}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
  const n = typeof r.n === 'number' ? r.n : 1;
  for (let i = 0; i < n; i++) {
    res.write(chunk([{ index: i, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]));
  }
  try {
    while (!first.done) {
      const e = first.value;
      if (e.type === 'delta') {
        res.write(
          chunk([
            {
              index: e.index,
              delta: e.content.length > 0 ? { content: e.content } : {},
              logprobs: wantLogprobs ? { content: logprobEntries(engine, e.tokenIds, e.logprobs), refusal: null } : null,
              finish_reason: null,
              mcprl_token_ids: e.tokenIds,
            },
          ]),
        );
      } else {
        const c = e.choice;
        if (c.toolCalls.length > 0) {
          const calls = wireToolCalls(c).map((t, k) => ({ index: k, ...t }));
          res.write(chunk([{ index: c.index, delta: { tool_calls: calls }, logprobs: null, finish_reason: null }]));
        }
        res.write(
          chunk([
            {
              index: c.index,
              delta: {},
              logprobs: null,
              finish_reason: c.finishReason,
              mcprl_token_ids: [],
              ...(c.invalidToolCalls.length > 0 ? { mcprl_invalid_tool_calls: c.invalidToolCalls } : {}),
            },
          ]),
        );
      }
      first = await events.next();
    }
    if (r.stream_options?.include_usage) res.write(chunk([], { usage: usage(first.value) }));
    res.write('data: [DONE]\n\n');
  } catch (err) {
    // Headers are gone; OpenAI's clients read an `error` object in the stream as a failure.
    if (!signal.aborted) {
      const mapped = toRequestError(err);
      const e = mapped instanceof ChatRequestError ? mapped : internalError(err);
      res.write(`data: ${JSON.stringify(errorBody(e))}\n\n`);
    }
  } finally {
    await events.return?.(undefined as never).catch(() => undefined);
    res.end();
  }
}

/** Reads a request body as JSON; ChatRequestError 413 past `maxBody` bytes, 400 when it is not JSON. */
export async function readJson(req: IncomingMessage, maxBody: number): Promise<unknown> {
  // A declared length over the cap is refused before a byte of the body is read.
  if (Number(req.headers['content-length'] ?? 0) > maxBody) {
    throw new ChatRequestError(413, `Request body over ${maxBody} bytes (the model's context bounds what a prompt can hold)`, { code: 'request_too_large' });
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > maxBody) throw new ChatRequestError(413, `Request body over ${maxBody} bytes`, { code: 'request_too_large' });
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ChatRequestError(400, `We could not parse the JSON body of your request: ${(err as Error).message}`, {
      code: 'invalid_json',
    });
  }
}

function methodNotAllowed(method: string, path: string): ChatRequestError {
  return new ChatRequestError(405, `Method ${method} not allowed on ${path}`, { code: 'method_not_allowed' });
}

function internalError(err: unknown): ChatRequestError {
  const message = err instanceof Error ? err.message : String(err);
  return new ChatRequestError(500, `Internal error: ${message}`, { type: 'server_error', cause: err });
}

function errorBody(e: ChatRequestError) {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
}

function sendError(res: ServerResponse, e: ChatRequestError): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  sendJson(res, e.status, errorBody(e));
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
