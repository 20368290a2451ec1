/**
 * `mcprl serve`'s HTTP face: an OpenAI-compatible chat-completions API on node:http over a ChatEngine, in
 * vLLM's dialect.
 *
 * Routes: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions` (JSON or SSE stream),
 * `GET /health`, `GET /metrics` (Prometheus text, see metrics.ts) and, with `loraUpdating`, vLLM's
 * `POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter` (see lora-adapters.ts). Errors use OpenAI's
 * `{"error": {message, type, param, code}}` shape. Every choice carries `mcprl_token_ids`, the exact sampled
 * ids, so training can use a served turn without re-tokenising, and a completion names the adapter that
 * generated it in `mcprl_adapter` (null: the base model). vLLM's `return_token_ids` adds `prompt_token_ids` and
 * per-choice `token_ids`; `return_tokens_as_token_ids` names logprob tokens `token_id:N`; mcprl's
 * `mcprl_sampler_logprobs` adds per-choice `mcprl_sampler` (the sampler's own logprobs, see openai-chat.ts).
 *
 * A tool call the model wrote but that cannot be read leaves its whole raw text in `content` when no call
 * could be read (as vLLM's tool parsers do, so standard clients see what the model said), and is listed in
 * `mcprl_invalid_tool_calls` for mcprl's own agent loop.
 *
 * One server may front several engines (one per base model, as the library's backends have): a request goes to
 * the engine that serves its `model` name, and `/v1/models` lists them all.
 *
 * Before any route, a request passes the guard every local mcprl server has (src/util/http-guard.ts: Host, Origin,
 * token, JSON bodies); a body is bounded in size and structure as it arrives (readJson, src/util/json-limits.ts).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { ChatChoice, ChatEngine, ChatResult, ChatTurnRequest } from '../chat/chat-engine.js';
import type { TokenAlternative } from '../engine/model.js';
import { checkBind, checkToken, createHttpGuard, type GuardRefusal } from '../util/http-guard.js';
import { listenHttp } from '../util/http-listen.js';
import { JsonLimitError, JsonLimitScanner, type JsonLimits } from '../util/json-limits.js';
import { AdapterRequestError, loadLoraAdapter, MaxAdaptersSchema, unloadLoraAdapter, type AdapterBudget, type MaxAdapters } from './lora-adapters.js';
import { METRICS_CONTENT_TYPE, ServeMetrics } from './metrics.js';
import { ChatRequestError, parseChatRequest, tokenLogprobs, toRequestError, toTurnRequest, type LogprobFormat } from './openai-chat.js';

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
  /**
   * Serve vLLM's `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`, which read adapter folders from this
   * machine's disk. Only for a server of one engine. Default false (`mcprl serve` turns it on unless
   * `--no-lora-updating`).
   */
  loraUpdating?: boolean;
  /** Most adapters served at once; a load of a new name past it is refused 400 (see MaxAdaptersSchema). Default 16. */
  maxAdapters?: MaxAdapters;
  /**
   * Bearer token every request but `/health` must carry (clients give it as their OpenAI API key). Required when
   * `host` is not a loopback address. Default none.
   */
  token?: string;
  /** Host names the Host header may carry besides the loopback names and `host` (see src/util/http-guard.ts). */
  allowedHosts?: readonly string[];
  /** Browser origins allowed besides the server's own. Default none. */
  allowedOrigins?: readonly string[];
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
  const host = opts.host ?? '127.0.0.1';
  await checkBind(host, opts.token === undefined ? undefined : checkToken(opts.token), 'mcprl serve');
  const server = createChatServer(engine, opts);
  const listening = await listenHttp(server, opts.port ?? 8000, host);
  return { server, url: `${listening.origin}/v1`, port: listening.port, close: listening.close };
}

/**
 * The request handler as a node:http server (not yet listening), behind the guard every local server has (Host,
 * Origin, token, JSON bodies: src/util/http-guard.ts).
 */
export function createChatServer(engine: ChatEngines, opts: ServerOptions = {}): Server {
  const guard = createHttpGuard({
    host: opts.host ?? '127.0.0.1',
    open: ['/health'],
    ...(opts.token !== undefined ? { token: opts.token } : {}),
    ...(opts.allowedHosts ? { allowedHosts: opts.allowedHosts } : {}),
    ...(opts.allowedOrigins ? { allowedOrigins: opts.allowedOrigins } : {}),
  });
  const listener = chatRequestListener(engine, opts);
  return createServer((req, res) => {
    const refused = guard.check(req);
    if (!refused) return listener(req, res);
    opts.log?.(`${req.method} ${req.url} ${refused.status} refused: ${refused.code}`);
    sendRefusal(res, refused);
  });
}

/** A guard's refusal in OpenAI's error shape; the body is left unread and the connection closed. */
function sendRefusal(res: ServerResponse, r: GuardRefusal): void {
  res.setHeader('connection', 'close');
  sendError(res, new ChatRequestError(r.status, r.message, { code: r.code }));
}

/** The request handler alone, for a server that mounts it beside routes of its own (`mcprl backend`). */
export function chatRequestListener(engine: ChatEngines, opts: ServerOptions = {}): RequestListener {
  // One model: the cap follows its context (see maxBodyBytes). Several (a backend's, which change): 32 MiB.
  const maxBody = opts.maxBodyBytes ?? (typeof engine === 'function' ? 32 * 1024 * 1024 : Math.min(32 * 1024 * 1024, 6 * engine.maxPromptChars + 1024 * 1024));
  const created = Math.floor(Date.now() / 1000);
  const engines = typeof engine === 'function' ? engine : () => [engine];
  const ctx: Context = {
    engines,
    maxBody,
    // A prompt's one string may take the whole body (the cap follows the context); depth and counts are the defaults.
    limits: { maxStringBytes: maxBody },
    created,
    metrics: new ServeMetrics(),
    // Runtime adapter updates need to know which engine an adapter is for: one engine only.
    updatable: opts.loraUpdating && typeof engine !== 'function' ? engine : null,
    adapters: { max: MaxAdaptersSchema.parse(opts.maxAdapters), loading: new Set() },
  };
  return (req, res) => {
    const t0 = Date.now();
    res.on('finish', () => {
      ctx.metrics.countHttp(routeOf(req), res.statusCode);
      opts.log?.(`${req.method} ${req.url} ${res.statusCode} ${Date.now() - t0}ms`);
    });
    handle(ctx, req, res).catch((err) => {
      // Last line of defence: nothing a request does may take the server down.
      if (err instanceof AdapterRequestError) sendJson(res, err.status, err.body());
      else sendError(res, err instanceof ChatRequestError ? err : internalError(err));
    });
  };
}

interface Context {
  engines: () => readonly ChatEngine[];
  maxBody: number;
  limits: Partial<JsonLimits>;
  created: number;
  metrics: ServeMetrics;
  /** The engine vLLM's adapter endpoints load into, or null when they are off. */
  updatable: ChatEngine | null;
  /** How many adapters the endpoints may leave loaded. */
  adapters: AdapterBudget;
}

const ROUTES = ['/health', '/metrics', '/v1/models', '/v1/chat/completions', '/v1/load_lora_adapter', '/v1/unload_lora_adapter'];

/** The route a request took, as a metrics label: a known route's pattern, else `other`. */
function routeOf(req: IncomingMessage): string {
  const path = pathOf(req);
  if (ROUTES.includes(path)) return path;
  return path.startsWith('/v1/models/') ? '/v1/models/{id}' : 'other';
}

function pathOf(req: IncomingMessage): string {
  return new URL(req.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '') || '/';
}

/** The engine serving `model`: the one that lists the name, else the first (which answers model_not_found). */
function engineFor(engines: readonly ChatEngine[], model: unknown): ChatEngine {
  const hit = engines.find((e) => e.modelNames().some((m) => m.id === model));
  if (hit) return hit;
  if (engines.length === 0) throw new ChatRequestError(404, `The model \`${String(model)}\` does not exist`, { param: 'model', code: 'model_not_found' });
  return engines[0];
}

async function handle(ctx: Context, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { engines, maxBody, created } = ctx;
  const path = pathOf(req);
  const method = req.method ?? 'GET';

  if (path === '/health' && method === 'GET') return sendJson(res, 200, { status: 'ok' });
  if (path === '/metrics' && method === 'GET') return sendText(res, 200, ctx.metrics.render(engines()), METRICS_CONTENT_TYPE);

  if ((path === '/v1/load_lora_adapter' || path === '/v1/unload_lora_adapter') && ctx.updatable) {
    if (method !== 'POST') throw methodNotAllowed(method, path);
    const body = await readJson(req, maxBody, ctx.limits);
    const line = path === '/v1/load_lora_adapter' ? await loadLoraAdapter(ctx.updatable, body, ctx.adapters) : await unloadLoraAdapter(ctx.updatable, body);
    return sendText(res, 200, line, 'text/plain; charset=utf-8');
  }

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
    const body = await readJson(req, maxBody, ctx.limits);
    const engine = engineFor(engines(), body && typeof body === 'object' ? (body as { model?: unknown }).model : undefined);
    // The client going away (connection closed before the answer is complete) cancels generation.
    const controller = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) controller.abort(new Error('client disconnected'));
    });
    const parsed = parseChatRequest(body);
    const wire: WireFormat = {
      logprobs: parsed.logprobs === true,
      tokensAsIds: parsed.return_tokens_as_token_ids === true,
      tokenIds: parsed.return_token_ids === true,
      sampler: parsed.mcprl_sampler_logprobs === true,
    };
    const turn = toTurnRequest(parsed, controller.signal);
    if (parsed.stream !== true) {
      const result = await engine.complete(turn).catch((err: unknown) => {
        if (controller.signal.aborted) ctx.metrics.countAborted();
        throw toRequestError(err);
      });
      ctx.metrics.countCompletion(result);
      return sendJson(res, 200, completionJson(engine, result, wire));
    }
    return streamCompletion(ctx, engine, turn, parsed, res, controller.signal, wire);
  }

  throw new ChatRequestError(404, `No route ${method} ${path}`, { code: 'not_found' });
}

/** What a request asked to see besides the completion itself. */
interface WireFormat extends LogprobFormat {
  logprobs: boolean;
  /** vLLM's return_token_ids: `prompt_token_ids` and per-choice `token_ids`. */
  tokenIds: boolean;
  /** mcprl_sampler_logprobs: per-choice `mcprl_sampler` (see openai-chat.ts). */
  sampler: boolean;
}

/** A choice's sampler logprobs, when the request asked for them (mcprl_sampler_logprobs). */
function samplerField(c: ChatChoice, wire: WireFormat): Record<string, unknown> {
  return wire.sampler ? { mcprl_sampler: { logprobs: c.samplerLogprobs, temperature: c.samplerTemperature, constrained: c.constrained } } : {};
}

function completionJson(engine: ChatEngine, r: ChatResult, wire: WireFormat): Record<string, unknown> {
  return {
    id: `chatcmpl-${randomUUID()}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: r.model,
    system_fingerprint: null,
    mcprl_adapter: r.adapter,
    ...(wire.tokenIds ? { prompt_token_ids: r.promptTokenIds } : {}),
    choices: r.choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant',
        content: wireContent(c),
        refusal: null,
        ...(c.toolCalls.length > 0 ? { tool_calls: wireToolCalls(c) } : {}),
      },
      logprobs: wire.logprobs ? { content: logprobEntries(engine, c.tokenIds, c.logprobs, c.topLogprobs, wire), refusal: null } : null,
      finish_reason: c.finishReason,
      ...(wire.tokenIds ? { token_ids: c.tokenIds } : {}),
      mcprl_token_ids: c.tokenIds,
      ...samplerField(c, wire),
      ...(c.invalidToolCalls.length > 0 ? { mcprl_invalid_tool_calls: c.invalidToolCalls } : {}),
    })),
    usage: usage(r),
  };
}

/**
 * The content a client sees: the text outside the tool calls, or — when the model wrote `<tool_call>` blocks
 * and none of them could be read — the whole text, as vLLM's tool parsers return it.
 */
function wireContent(c: ChatChoice): string | null {
  return c.toolCalls.length === 0 && c.invalidToolCalls.length > 0 ? c.text : c.content;
}

function usage(r: ChatResult) {
  const completionTokens = r.choices.reduce((s, c) => s + c.tokenIds.length, 0);
  const promptTokens = r.promptTokenIds.length;
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

function wireToolCalls(c: ChatChoice) {
  return c.toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } }));
}

function logprobEntries(engine: ChatEngine, ids: number[], lps: number[], top: TokenAlternative[][] | undefined, f: LogprobFormat) {
  return tokenLogprobs(engine.tokenizer, ids, lps, top, f);
}

async function streamCompletion(
  ctx: Context,
  engine: ChatEngine,
  turn: ChatTurnRequest,
  r: ReturnType<typeof parseChatRequest>,
  res: ServerResponse,
  signal: AbortSignal,
  wire: WireFormat,
): Promise<void> {
  const events = engine.stream(turn);
  // The first step checks the request (a bad one is answered as plain JSON with its status code) and gives the
  // prompt's ids; the second is awaited too, so that a failure before the first token is still plain JSON.
  const step = () => events.next().catch((err: unknown) => {
    throw toRequestError(err);
  });
  const started = await step();
  if (started.done || started.value.type !== 'start') throw internalError(new Error('the engine\'s stream did not begin with its prompt'));
  const prompt = started.value.promptTokenIds;
  let first = await step();
  const id = `chatcmpl-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: r.model, system_fingerprint: null, choices, ...extra })}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
  const n = r.n ?? 1;
  // vLLM sends the prompt's ids once, in the first chunk: the ids the engine rendered and tokenised.
  const promptIds = wire.tokenIds ? { prompt_token_ids: prompt } : {};
  for (let i = 0; i < n; i++) {
    res.write(chunk([{ index: i, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], i === 0 ? promptIds : {}));
  }
  // Content sent per choice, so that an unreadable call's raw text can follow it at the end.
  const sent = Array.from({ length: n }, () => '');
  try {
    while (!first.done) {
      const e = first.value;
      if (e.type === 'delta') {
        sent[e.index] += e.content;
        res.write(
          chunk([
            {
              index: e.index,
              delta: e.content.length > 0 ? { content: e.content } : {},
              logprobs: wire.logprobs ? { content: logprobEntries(engine, e.tokenIds, e.logprobs, e.topLogprobs, wire), refusal: null } : null,
              finish_reason: null,
              ...(wire.tokenIds ? { token_ids: e.tokenIds } : {}),
              mcprl_token_ids: e.tokenIds,
            },
          ]),
        );
      } else if (e.type === 'finish') {
        const c = e.choice;
        // As in a whole answer (wireContent): the raw text of unreadable calls, when it continues what was sent.
        const raw = wireContent(c);
        if (raw !== null && raw !== c.content && raw.startsWith(sent[c.index]) && raw.length > sent[c.index].length) {
          const rest = raw.slice(sent[c.index].length);
          sent[c.index] = raw;
          res.write(
            chunk([
              { index: c.index, delta: { content: rest }, logprobs: null, finish_reason: null, ...(wire.tokenIds ? { token_ids: [] } : {}), mcprl_token_ids: [] },
            ]),
          );
        }
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
              ...(wire.tokenIds ? { token_ids: [] } : {}),
              mcprl_token_ids: [],
              // The whole choice's sampler logprobs, once, with its finish (the deltas carry the model's).
              ...samplerField(c, wire),
              ...(c.invalidToolCalls.length > 0 ? { mcprl_invalid_tool_calls: c.invalidToolCalls } : {}),
            },
          ]),
        );
      }
      first = await events.next();
    }
    ctx.metrics.countCompletion(first.value);
    if (r.stream_options?.include_usage) res.write(chunk([], { usage: usage(first.value) }));
    res.write('data: [DONE]\n\n');
  } catch (err) {
    if (signal.aborted) ctx.metrics.countAborted();
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

/**
 * Reads a request body as JSON; ChatRequestError 413 past `maxBody` bytes, 400 when it is not JSON or when its
 * structure passes a limit (depth, array length, object size, string size: src/util/json-limits.ts). Both bounds are
 * checked on the bytes as they arrive, so the body is refused before the rest of it is read and before JSON.parse
 * builds anything; the error names the field (`param`).
 */
export async function readJson(req: IncomingMessage, maxBody: number, limits: Partial<JsonLimits> = {}): Promise<unknown> {
  // A declared length over the cap is refused before a byte of the body is read.
  if (Number(req.headers['content-length'] ?? 0) > maxBody) {
    throw new ChatRequestError(413, `Request body over ${maxBody} bytes (the model's context bounds what a prompt can hold)`, { code: 'request_too_large' });
  }
  const scanner = new JsonLimitScanner(limits);
  let chunks: Buffer[] = [];
  let size = 0;
  let refused: ChatRequestError | null = null;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > maxBody) throw new ChatRequestError(413, `Request body over ${maxBody} bytes`, { code: 'request_too_large' });
    if (refused) continue;
    try {
      scanner.push(c as Buffer);
      chunks.push(c as Buffer);
    } catch (err) {
      if (!(err instanceof JsonLimitError)) throw err;
      // Refused: what was read is dropped, and the rest (at most maxBody bytes) is read and discarded, so that the
      // client, still sending, reads the answer rather than a reset connection.
      chunks = [];
      refused = new ChatRequestError(400, `Request body refused: ${err.message}`, { param: err.field, code: 'request_too_complex', cause: err });
    }
  }
  if (refused) throw refused;
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
  sendText(res, status, JSON.stringify(body), 'application/json; charset=utf-8');
}

function sendText(res: ServerResponse, status: number, text: string, contentType: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
