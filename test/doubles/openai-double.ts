/**
 * A local OpenAI-compatible HTTP server for tests. It stands in for a remote LLM API (which cannot run in
 * tests here); everything else in the pipeline is real.
 *
 * Each incoming request takes the next scripted reply from a queue, in order; every request is recorded.
 * When the queue is empty the `fallback` reply is used, or — if there is none — the double answers HTTP 500
 * with "openai-double: no scripted reply left", so a test that under-scripts fails loudly instead of hanging.
 *
 * ```ts
 * const llm = await startOpenAIDouble([
 *   httpError(500, 'boom'),                 // first request
 *   chatReply('{"scenarios": []}'),         // second request
 *   (req) => chatReply(`you sent ${req.body.model}`), // computed from the request
 * ]);
 * const client = new OpenAI({ baseURL: llm.baseURL, apiKey: 'test', maxRetries: 0 });
 * ...
 * expect(llm.requests[1].body.response_format).toEqual(...);
 * await llm.close();
 * ```
 *
 * Routes: any POST (normally `/v1/chat/completions`) consumes a reply; `GET /v1/models` answers a fixed
 * model list without consuming one. Chat replies honour `stream: true` in the request by sending the same
 * message as Server-Sent Events (one content/tool-call delta chunk, a finish chunk, then `[DONE]`).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the double received it. */
export interface RecordedRequest {
  method: string;
  /** Path including query, e.g. `/v1/chat/completions`. */
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Parsed JSON body (`undefined` when the body was empty or not JSON). */
  body: any;
  /** The raw body text. */
  rawBody: string;
}

/** A scripted reply. Build them with chatReply / toolCallReply / httpError / rawReply / hangReply. */
export type Reply =
  | { kind: 'json'; status: number; json: unknown; headers?: Record<string, string> }
  | { kind: 'raw'; status: number; body: string; headers?: Record<string, string> }
  /** Never answers (until the double is closed): for testing client timeouts. */
  | { kind: 'hang' };

/** A reply, or a function computing one from the request (and its 0-based index). */
export type ScriptedReply = Reply | ((req: RecordedRequest, index: number) => Reply);

export interface ToolCallSpec {
  name: string;
  /** Arguments object (serialised to JSON) or an already serialised string (may be deliberately invalid). */
  arguments: Record<string, unknown> | string;
  id?: string;
}

export interface ChatReplyOptions {
  /** Default "stop" (or "tool_calls" when tool calls are given). */
  finishReason?: 'stop' | 'length' | 'tool_calls' | 'content_filter';
  toolCalls?: ToolCallSpec[];
  /** Model name echoed in the reply. Default "double-model". */
  model?: string;
  usage?: { prompt_tokens: number; completion_tokens: number };
}

let completionCounter = 0;

/** A successful chat.completion with one choice whose message content is `content` (null allowed). */
export function chatReply(content: string | null, opts: ChatReplyOptions = {}): Reply {
  const toolCalls = opts.toolCalls?.map((t, i) => ({
    id: t.id ?? `call_${i}`,
    type: 'function' as const,
    function: { name: t.name, arguments: typeof t.arguments === 'string' ? t.arguments : JSON.stringify(t.arguments) },
  }));
  const usage = opts.usage ?? { prompt_tokens: 10, completion_tokens: 10 };
  return {
    kind: 'json',
    status: 200,
    json: {
      id: `chatcmpl-double-${++completionCounter}`,
      object: 'chat.completion',
      created: 1_700_000_000,
      model: opts.model ?? 'double-model',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content, ...(toolCalls?.length ? { tool_calls: toolCalls } : {}) },
          finish_reason: opts.finishReason ?? (toolCalls?.length ? 'tool_calls' : 'stop'),
          logprobs: null,
        },
      ],
      usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
    },
  };
}

/** A chat.completion whose message carries tool calls (and optional content). */
export function toolCallReply(toolCalls: ToolCallSpec[], content: string | null = null, opts: ChatReplyOptions = {}): Reply {
  return chatReply(content, { ...opts, toolCalls });
}

/** An HTTP error in OpenAI's error shape: `{error:{message, type, code}}`. */
export function httpError(status: number, message: string, code: string | null = null): Reply {
  return {
    kind: 'json',
    status,
    json: { error: { message, type: status >= 500 ? 'server_error' : 'invalid_request_error', param: null, code } },
  };
}

/** Any status with an arbitrary body (e.g. a non-JSON 200 to test parse failures). */
export function rawReply(status: number, body: string, headers?: Record<string, string>): Reply {
  return { kind: 'raw', status, body, headers };
}

/** A reply that never comes. */
export function hangReply(): Reply {
  return { kind: 'hang' };
}

export interface OpenAIDouble {
  /** Base URL to give the OpenAI SDK, ending in `/v1`. */
  baseURL: string;
  /** Every request received, in order (including GET /v1/models). */
  requests: RecordedRequest[];
  /** Appends replies to the queue. */
  push(...replies: ScriptedReply[]): void;
  /** Replies not yet consumed. */
  pending(): number;
  close(): Promise<void>;
}

export interface OpenAIDoubleOptions {
  /** Used for every request once the queue is empty. */
  fallback?: ScriptedReply;
}

/** Starts the double on 127.0.0.1 with an ephemeral port. */
export async function startOpenAIDouble(replies: ScriptedReply[] = [], opts: OpenAIDoubleOptions = {}): Promise<OpenAIDouble> {
  const queue: ScriptedReply[] = [...replies];
  const requests: RecordedRequest[] = [];
  const hanging = new Set<http.ServerResponse>();
  let replyIndex = 0;

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      let body: any;
      try {
        body = rawBody ? JSON.parse(rawBody) : undefined;
      } catch {
        body = undefined;
      }
      const recorded: RecordedRequest = { method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, body, rawBody };
      requests.push(recorded);

      if (recorded.method === 'GET' && recorded.path.replace(/\?.*/, '').endsWith('/models')) {
        send(res, { kind: 'json', status: 200, json: { object: 'list', data: [{ id: 'double-model', object: 'model', created: 0, owned_by: 'double' }] } }, recorded);
        return;
      }
      const scripted = queue.length > 0 ? queue.shift()! : opts.fallback;
      const index = replyIndex++;
      if (!scripted) {
        send(res, httpError(500, 'openai-double: no scripted reply left'), recorded);
        return;
      }
      let reply: Reply;
      try {
        reply = typeof scripted === 'function' ? scripted(recorded, index) : scripted;
      } catch (err) {
        reply = httpError(500, `openai-double: reply function threw: ${(err as Error).message}`);
      }
      if (reply.kind === 'hang') {
        hanging.add(res);
        res.on('close', () => hanging.delete(res));
        return;
      }
      send(res, reply, recorded);
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    push: (...r) => void queue.push(...r),
    pending: () => queue.length,
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function send(res: http.ServerResponse, reply: Reply, req: RecordedRequest): void {
  if (reply.kind === 'hang') return;
  if (reply.kind === 'raw') {
    res.writeHead(reply.status, { 'content-type': 'text/plain', ...reply.headers });
    res.end(reply.body);
    return;
  }
  const json = reply.json as any;
  if (req.body?.stream === true && reply.status === 200 && json?.object === 'chat.completion') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...reply.headers });
    for (const chunk of toStreamChunks(json)) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    res.end('data: [DONE]\n\n');
    return;
  }
  res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
  res.end(JSON.stringify(reply.json));
}

/** Turns a chat.completion into the equivalent chat.completion.chunk sequence. */
function toStreamChunks(completion: any): unknown[] {
  const base = { id: completion.id, object: 'chat.completion.chunk', created: completion.created, model: completion.model };
  const choice = completion.choices[0];
  const msg = choice.message;
  const delta: Record<string, unknown> = { role: 'assistant', content: msg.content ?? '' };
  if (msg.tool_calls) {
    delta.tool_calls = msg.tool_calls.map((t: any, index: number) => ({ index, ...t }));
  }
  return [
    { ...base, choices: [{ index: 0, delta, finish_reason: null, logprobs: null }] },
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: choice.finish_reason, logprobs: null }], usage: completion.usage },
  ];
}
