import OpenAI from 'openai';
import { APIError } from 'openai';
import { McprlError } from '../util/errors.js';

export type JudgeErrorCode =
  /** The endpoint answered with an HTTP error status (see `status`). */
  | 'JUDGE_HTTP'
  /** The endpoint could not be reached (connection refused, DNS, timeout). */
  | 'JUDGE_UNREACHABLE'
  /** The answer was not the JSON we asked for, or its scores were out of range. */
  | 'JUDGE_INVALID_OUTPUT'
  /** The answer scored a different set of trajectories than it was given. */
  | 'JUDGE_WRONG_COUNT'
  /** A reward mode that needs the judge was asked for without one (see resolveRewardMode). */
  | 'JUDGE_MISSING';

/** A failure of the judge: infrastructure or an unusable answer. Retryable ones are retried by RULER. */
export class JudgeError extends McprlError<JudgeErrorCode> {
  readonly status?: number;
  /** How long the endpoint asked us to wait before trying again (its Retry-After header), in milliseconds. */
  readonly retryAfterMs?: number;
  constructor(code: JudgeErrorCode, message: string, opts: { status?: number; retryAfterMs?: number; cause?: unknown } = {}) {
    super(code, message, { cause: opts.cause });
    this.status = opts.status;
    this.retryAfterMs = opts.retryAfterMs;
  }

  /** Worth another attempt: bad output, rate limits, server errors, network failures. Not 4xx client errors. */
  get retryable(): boolean {
    if (this.code === 'JUDGE_HTTP') return this.status === 429 || this.status === 408 || (this.status ?? 0) >= 500;
    return this.code !== 'JUDGE_MISSING';
  }
}

export interface JudgeRequest {
  messages: { role: 'system' | 'user'; content: string }[];
  /** When set, ask for structured output with this JSON schema. */
  jsonSchema?: { name: string; schema: Record<string, unknown> };
  signal?: AbortSignal;
}

/** Anything that can answer a judging prompt with text. Throws JudgeError. */
export interface JudgeClient {
  readonly model: string;
  complete(req: JudgeRequest): Promise<string>;
}

/** How long one judge request may take, in milliseconds. */
export const DEFAULT_JUDGE_TIMEOUT_MS = 120_000;

/** A Retry-After header (delay-seconds or an HTTP date) in milliseconds from now; undefined when absent or unreadable. */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value === null || value === undefined || value.trim() === '') return undefined;
  const seconds = Number(value.trim());
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

export interface OpenAIJudgeOptions {
  baseURL: string;
  model: string;
  /** Default: a placeholder, which local servers accept. */
  apiKey?: string;
  /** Request timeout in milliseconds. Default DEFAULT_JUDGE_TIMEOUT_MS. */
  timeoutMs?: number;
  /** Sampling temperature. Default 0 (judging should be as repeatable as the endpoint allows). */
  temperature?: number;
}

/**
 * A judge behind any OpenAI-compatible endpoint. Asks for `json_schema` structured output; if the endpoint
 * rejects that with a 400, it falls back to asking in plain text (RULER parses JSON out of the answer) for
 * the rest of its life. Retries are RULER's job, so the SDK's own are off.
 */
export class OpenAIJudge implements JudgeClient {
  readonly model: string;
  private readonly client: OpenAI;
  private readonly temperature: number;
  private structured = true;

  constructor(opts: OpenAIJudgeOptions) {
    this.model = opts.model;
    this.temperature = opts.temperature ?? 0;
    this.client = new OpenAI({
      baseURL: opts.baseURL,
      apiKey: opts.apiKey ?? 'sk-no-key',
      maxRetries: 0,
      timeout: opts.timeoutMs ?? DEFAULT_JUDGE_TIMEOUT_MS,
    });
  }

  async complete(req: JudgeRequest): Promise<string> {
    const useSchema = this.structured && req.jsonSchema !== undefined;
    try {
      return await this.send(req, useSchema);
    } catch (err) {
      if (useSchema && err instanceof APIError && err.status === 400) {
        this.structured = false;
        return this.send(req, false).catch((e) => {
          throw toJudgeError(e);
        });
      }
      throw toJudgeError(err);
    }
  }

  private async send(req: JudgeRequest, useSchema: boolean): Promise<string> {
    const completion = await this.client.chat.completions.create(
      {
        model: this.model,
        messages: req.messages,
        temperature: this.temperature,
        ...(useSchema && req.jsonSchema
          ? {
              response_format: {
                type: 'json_schema' as const,
                json_schema: { name: req.jsonSchema.name, schema: req.jsonSchema.schema, strict: true },
              },
            }
          : {}),
      },
      { signal: req.signal },
    );
    const content = completion.choices?.[0]?.message?.content;
    if (typeof content !== 'string' || content.trim() === '') {
      throw new JudgeError('JUDGE_INVALID_OUTPUT', 'judge returned an empty answer');
    }
    return content;
  }
}

function toJudgeError(err: unknown): JudgeError {
  if (err instanceof JudgeError) return err;
  if (err instanceof APIError) {
    if (err.status === undefined) {
      return new JudgeError('JUDGE_UNREACHABLE', `judge endpoint unreachable: ${err.message}`, { cause: err });
    }
    return new JudgeError('JUDGE_HTTP', `judge endpoint answered HTTP ${err.status}: ${err.message}`, {
      status: err.status,
      retryAfterMs: retryAfterMs(err.headers?.get('retry-after')),
      cause: err,
    });
  }
  // The SDK throws plain errors for bodies that are not JSON.
  const message = err instanceof Error ? err.message : String(err);
  return new JudgeError('JUDGE_INVALID_OUTPUT', `judge request failed: ${message}`, { cause: err });
}
