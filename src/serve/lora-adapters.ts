/**
 * vLLM's runtime LoRA endpoints, `POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace?}` and
 * `POST /v1/unload_lora_adapter {lora_name}`, mapped onto the chat core's addAdapter / removeAdapter (which
 * keep running requests on the adapter they started with). Answers are vLLM's: 200 with a plain-text
 * `Success: …` line, or `{"error": {message, type, param, code}}` where `type` is vLLM's error class name
 * (InvalidUserInput, NotFoundError, BadRequestError) and `code` is the HTTP status as a number.
 */
import { z } from 'zod';
import { ChatError, type ChatEngine } from '../chat/chat-engine.js';
import { McprlError } from '../util/errors.js';
import { safeParseFirst } from '../util/json-limits.js';

/**
 * Most LoRA adapters a server serves at once, those given at start and those loaded since together. A load of a new
 * name past it is refused (400) until one is unloaded; replacing a served name (`load_inplace`) always may. Default 16.
 */
export const MaxAdaptersSchema = z.number().int().min(1).max(4096).default(16);
export type MaxAdapters = z.input<typeof MaxAdaptersSchema>;

export const loadLoraAdapterRequestSchema = z.object({
  /** Name to serve the adapter under (the `model` field of later requests). */
  lora_name: z.string().nullish(),
  /** A PEFT adapter folder on the server's machine. */
  lora_path: z.string().nullish(),
  /** Replace an adapter already served under lora_name (running requests finish on the old one). Default false. */
  load_inplace: z.boolean().nullish(),
});
export type LoadLoraAdapterRequest = z.input<typeof loadLoraAdapterRequestSchema>;

export const unloadLoraAdapterRequestSchema = z.object({
  lora_name: z.string().nullish(),
  /** vLLM's numeric adapter id; mcprl names adapters only, so it is accepted and ignored. */
  lora_int_id: z.number().int().nullish(),
});
export type UnloadLoraAdapterRequest = z.input<typeof unloadLoraAdapterRequestSchema>;

/** vLLM's error class names, which its error bodies carry as `type`. */
export type AdapterErrorType = 'InvalidUserInput' | 'NotFoundError' | 'BadRequestError';

/** A refused load or unload, answered in vLLM's shape. */
export class AdapterRequestError extends McprlError<AdapterErrorType> {
  readonly status: 400 | 404;
  readonly param: string | null;
  constructor(type: AdapterErrorType, message: string, opts: { param?: string | null; cause?: unknown } = {}) {
    super(type, message, { cause: opts.cause });
    this.status = type === 'NotFoundError' ? 404 : 400;
    this.param = opts.param ?? null;
  }

  /** vLLM's error body: the HTTP status doubles as `code`. */
  body(): { error: { message: string; type: AdapterErrorType; param: string | null; code: number } } {
    return { error: { message: this.message, type: this.code, param: this.param, code: this.status } };
  }
}

/** The vLLM error type of each chat-core refusal an adapter operation can meet. */
const ERROR_TYPES: Partial<Record<ChatError['code'], AdapterErrorType>> = {
  ADAPTER_EXISTS: 'InvalidUserInput',
  ADAPTER_NAME: 'InvalidUserInput',
  ADAPTER_PATH_NOT_FOUND: 'NotFoundError',
  ADAPTER_NOT_FOUND: 'NotFoundError',
  ADAPTER_INVALID: 'BadRequestError',
};

function parse<T extends z.ZodType>(schema: T, body: unknown): z.output<T> {
  const r = safeParseFirst(schema, body);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const param = issue.path.map(String).join('.') || null;
  throw new AdapterRequestError('BadRequestError', param ? `${param}: ${issue.message}` : issue.message, { param });
}

function adapterError(err: unknown): unknown {
  if (err instanceof ChatError && ERROR_TYPES[err.code]) return new AdapterRequestError(ERROR_TYPES[err.code]!, err.message, { param: err.param, cause: err });
  return err;
}

/** How many adapters a server may hold, and the new names being loaded now (they count before they are served). */
export interface AdapterBudget {
  max: number;
  loading: Set<string>;
}

/** Handles a load request body; resolves with vLLM's success line. */
export async function loadLoraAdapter(engine: ChatEngine, body: unknown, budget?: AdapterBudget): Promise<string> {
  const req = parse(loadLoraAdapterRequestSchema, body);
  if (!req.lora_name || !req.lora_path) throw new AdapterRequestError('InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
  const name = req.lora_name;
  const served = engine.modelNames().filter((m) => m.adapter !== null).map((m) => m.id);
  // A replacement (or a second load of a name being loaded, which the engine orders after the first) adds none.
  const adds = !served.includes(name) && !budget?.loading.has(name);
  if (budget && adds && served.length + budget.loading.size >= budget.max) {
    throw new AdapterRequestError(
      'BadRequestError',
      `Loading lora ${name} failed: the server holds ${served.length + budget.loading.size} adapters, its most (--max-adapters ${budget.max}); unload one first.`,
      { param: 'lora_name' },
    );
  }
  if (budget && adds) budget.loading.add(name);
  try {
    await engine.addAdapter(name, req.lora_path, { replace: req.load_inplace ?? false }).catch((err: unknown) => {
      throw adapterError(err);
    });
  } finally {
    if (adds) budget?.loading.delete(name);
  }
  return `Success: LoRA adapter '${name}' added successfully.`;
}

/** Handles an unload request body; resolves with vLLM's success line. */
export async function unloadLoraAdapter(engine: ChatEngine, body: unknown): Promise<string> {
  const req = parse(unloadLoraAdapterRequestSchema, body);
  if (!req.lora_name) throw new AdapterRequestError('InvalidUserInput', "'lora_name' needs to be provided to unload a LoRA adapter.");
  await engine.removeAdapter(req.lora_name).catch((err: unknown) => {
    throw adapterError(err);
  });
  return `Success: LoRA adapter '${req.lora_name}' removed successfully.`;
}
