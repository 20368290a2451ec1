/**
 * Records a trajectory from the chat-completion calls an agent makes, with no change to the agent's code: the
 * recorder's `fetch` goes into the `openai` client (`model.openai({ fetch: recorder.fetch })`, or any client
 * that takes a fetch), sees each request and its answer, and keeps the exact token ids and logprobs the server
 * returned for every assistant turn (`mcprl_token_ids`, `logprobs.content`). It asks for logprobs on every
 * request, whether or not the agent did.
 *
 * Streamed completions (`stream: true`) are recorded too: the recorder reads the server-sent events as they pass
 * to the agent and puts the first choice back together (content, tool calls, and the ids and logprobs each chunk
 * carried). The answer is recorded when the stream's `[DONE]` passes (or its end, for a server that sends none),
 * before the agent can see it, so a trajectory built after the agent has read its stream always includes it.
 *
 * The trajectory is the conversation of the last call (its messages plus the answer); each earlier assistant
 * turn in it is matched with the recorded answer it came from (by tool-call id, else by its text), so its ids
 * are the sampled ones. A turn with no recorded answer (written by the application) keeps only its text and is
 * tokenised when trained on.
 */
import { randomBytes } from 'node:crypto';
import type { ChatMessage } from '../chat/message.js';
import { chatMessageSchema, type ChatRequest } from '../serve/openai-chat.js';
import { BackendError } from './errors.js';
import type { TrajectoryInput } from './schemas.js';

interface CompletionChoice {
  message?: { content?: string | null; tool_calls?: { id: string; function: { name: string; arguments: string } }[] | null };
  logprobs?: { content?: { logprob: number }[] | null } | null;
  mcprl_token_ids?: number[];
}

interface RecordedCall {
  request: ChatRequest;
  choice: CompletionChoice;
}

export class TrajectoryRecorder {
  /** Every completion recorded, in the order the answers arrived. */
  readonly calls: RecordedCall[] = [];
  private readonly inner: typeof fetch;

  /** `inner` does the real fetching. Default: the global fetch. */
  constructor(opts: { fetch?: typeof fetch } = {}) {
    this.inner = opts.fetch ?? globalThis.fetch;
  }

  /** A fetch that records chat completions and passes everything else through. */
  readonly fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    if (!/\/chat\/completions$/.test(new URL(url).pathname) || typeof init?.body !== 'string') return this.inner(input, init);
    const request = JSON.parse(init.body) as ChatRequest;
    const res = await this.inner(input, { ...init, body: JSON.stringify({ ...request, logprobs: true }) });
    if (res.ok && request.stream) {
      if (!res.body) return res;
      const assembler = new StreamAssembler();
      const record = () => {
        const choice = assembler.finish();
        if (choice) this.calls.push({ request, choice });
      };
      return new Response(res.body.pipeThrough(sseTap(assembler, record)), { status: res.status, statusText: res.statusText, headers: res.headers });
    }
    if (res.ok) {
      const body = (await res.clone().json()) as { choices?: CompletionChoice[] };
      const choice = body.choices?.[0];
      if (choice) this.calls.push({ request, choice });
    }
    return res;
  };

  /**
   * The trajectory of the last recorded call, with `reward` (and optional metrics and metadata). Throws RECORDER
   * when nothing was recorded.
   */
  trajectory(score: { reward: number; metrics?: Record<string, number>; metadata?: Record<string, unknown> }): TrajectoryInput {
    const last = this.calls[this.calls.length - 1];
    if (!last) throw new BackendError('RECORDER', 'no chat completion was recorded: did the agent use the recorder\'s fetch?');
    const history = last.request.messages.map((m) => toTrajectoryMessage(chatMessageSchema.parse(m)));
    const used = new Set<RecordedCall>([last]);
    const messages: ChatMessage[] = history.map((m) => {
      if (m.role !== 'assistant') return m;
      const call = this.calls.find((c) => !used.has(c) && sameTurn(c.choice, m));
      if (!call) return m;
      used.add(call);
      return withTokens(m, call.choice);
    });
    messages.push(withTokens(answerMessage(last.choice), last.choice));
    return {
      messages,
      tools: (last.request.tools ?? []) as TrajectoryInput['tools'],
      reward: score.reward,
      metrics: score.metrics ?? {},
      metadata: score.metadata ?? {},
    };
  }
}

interface StreamChunk {
  error?: unknown;
  choices?: {
    index?: number;
    delta?: {
      content?: string | null;
      tool_calls?: { index?: number; id?: string; function?: { name?: string; arguments?: string } }[] | null;
    };
    logprobs?: { content?: { logprob: number }[] | null } | null;
    mcprl_token_ids?: number[];
  }[];
}

/** Puts a streamed completion's first choice back together, chunk by chunk. */
class StreamAssembler {
  private content: string | null = null;
  private readonly calls: { id: string; function: { name: string; arguments: string } }[] = [];
  private readonly ids: number[] = [];
  private readonly logprobs: { logprob: number }[] = [];
  private seen = false;
  private failed = false;
  private done = false;

  add(chunk: StreamChunk): void {
    if (chunk.error !== undefined) this.failed = true;
    for (const c of chunk.choices ?? []) {
      if ((c.index ?? 0) !== 0) continue;
      this.seen = true;
      if (typeof c.delta?.content === 'string') this.content = (this.content ?? '') + c.delta.content;
      for (const t of c.delta?.tool_calls ?? []) {
        const k = t.index ?? this.calls.length;
        const call = (this.calls[k] ??= { id: '', function: { name: '', arguments: '' } });
        if (t.id) call.id = t.id;
        if (t.function?.name) call.function.name += t.function.name;
        if (t.function?.arguments) call.function.arguments += t.function.arguments;
      }
      if (c.mcprl_token_ids) this.ids.push(...c.mcprl_token_ids);
      if (c.logprobs?.content) this.logprobs.push(...c.logprobs.content);
    }
  }

  /** The whole choice, once (null for a stream that failed or held no choice). */
  finish(): CompletionChoice | null {
    if (this.done) return null;
    this.done = true;
    if (this.failed || !this.seen) return null;
    const calls = this.calls.filter((c) => c !== undefined);
    return {
      message: { content: this.content === '' && calls.length > 0 ? null : this.content, ...(calls.length > 0 ? { tool_calls: calls } : {}) },
      logprobs: { content: this.logprobs },
      mcprl_token_ids: this.ids,
    };
  }
}

/**
 * Passes a server-sent event stream through unchanged while handing each `data:` event to `assembler`; calls
 * `done` when `[DONE]` arrives (before that chunk is passed on) or when the stream ends.
 */
function sseTap(assembler: StreamAssembler, done: () => void): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  let buffered = '';
  const events = (text: string) => {
    buffered += text;
    let end: number;
    while ((end = buffered.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event
        .split(/\r?\n/)
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart())
        .join('\n');
      if (data === '') continue;
      if (data === '[DONE]') {
        done();
        continue;
      }
      try {
        assembler.add(JSON.parse(data) as StreamChunk);
      } catch {
        // Not JSON: not a chunk the recorder knows; the agent's client decides what it means.
      }
    }
  };
  return new TransformStream({
    transform(chunk, controller) {
      events(decoder.decode(chunk, { stream: true }));
      controller.enqueue(chunk);
    },
    flush() {
      events(decoder.decode() + '\n\n');
      done();
    },
  });
}

/**
 * A request message (already in the chat message shape) as trajectories keep it: every tool call with an id, and
 * no reasoning_content (see TrajectoryMessageSchema).
 */
function toTrajectoryMessage(m: ChatMessage): ChatMessage {
  if (m.role !== 'assistant') return m;
  const { reasoning_content: _reasoning, tool_calls: calls, ...rest } = m;
  const withIds = (calls ?? []).map((c) => ({ id: c.id ?? `call_${randomBytes(12).toString('hex')}`, type: c.type, function: c.function }));
  return { ...rest, ...(withIds.length > 0 ? { tool_calls: withIds } : {}) };
}

function answerMessage(choice: CompletionChoice): ChatMessage {
  const calls = (choice.message?.tool_calls ?? []).map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.function.name, arguments: c.function.arguments } }));
  return { role: 'assistant', content: choice.message?.content ?? null, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}

/** True when an assistant message of the history is the answer `choice` (same tool-call ids, else same text). */
function sameTurn(choice: CompletionChoice, m: ChatMessage): boolean {
  const ids = (choice.message?.tool_calls ?? []).map((c) => c.id);
  const mine = (m.tool_calls ?? []).map((c) => c.id);
  if (ids.length > 0 || mine.length > 0) return ids.length === mine.length && ids.every((id, i) => id === mine[i]);
  return (choice.message?.content ?? null) === m.content;
}

/** The message with the answer's sampled ids and logprobs, when the server returned both for every token. */
function withTokens(m: ChatMessage, choice: CompletionChoice): ChatMessage {
  const ids = choice.mcprl_token_ids;
  const lps = choice.logprobs?.content?.map((t) => t.logprob);
  if (!ids || ids.length === 0 || !lps || lps.length !== ids.length) return m;
  return { ...m, mcprl: { token_ids: ids, logprobs: lps } };
}
