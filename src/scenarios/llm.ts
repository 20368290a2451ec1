/**
 * LLM-generated scenarios (AutoRL): ask any OpenAI-compatible endpoint for realistic tasks a user would want
 * done with a server's tools.
 *
 * Output format negotiation: `response_format: json_schema` first; if the endpoint rejects it (HTTP 400/422)
 * we fall back to `json_object`, then to plain text from which the JSON is extracted (fenced block or the
 * outermost braces). Each answer is validated with zod item by item; we ask again for the remainder until
 * `count` valid, non-duplicate scenarios are collected or `maxAttempts` requests were made, and then fail
 * with a clear message. HTTP failures (5xx, network) are retried by the SDK (`maxRetries`); if they persist,
 * generation fails with ScenarioGenerationError instead of waiting forever (every request has `timeoutMs`).
 *
 * Grounding (`ground`, see grounded.ts): the prompt also lists the entities discovery found, every item carries its
 * intended solution, and an item is kept only when the replay of its solution shows it feasible; it then carries the
 * replay's checks. Dropped items are counted by reason.
 */
import OpenAI from 'openai';
import { z } from 'zod';
import type { ToolInfo } from '../mcp/index.js';
import { DEFAULT_DUPLICATE_THRESHOLD, DuplicateFilter } from './dedup.js';
import { hashString } from '../util/rng.js';
import type { Scenario } from './scenario.js';
import { formatInfeasible, type InfeasibleCounts } from './coverage.js';
import type { Grounding } from './grounded.js';
import type { DiscoveredEntity } from './offline/index.js';
import { McprlError } from '../util/errors.js';
import { extractJson } from '../util/extract-json.js';

/**
 * How long one generator request may take, in milliseconds. With the SDK's retries (which honour Retry-After) and
 * the attempt budget, it bounds the whole generation.
 */
export const DEFAULT_GENERATOR_TIMEOUT_MS = 120_000;

/** LLM generation failed for good (endpoint errors, or too few valid scenarios within the attempt budget). */
export class ScenarioGenerationError extends McprlError<'SCENARIO_GENERATION'> {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SCENARIO_GENERATION', message, options);
  }
}

/** What the LLM is told about the server. */
export interface ServerCatalog {
  serverName?: string;
  tools: ToolInfo[];
  resources?: { uri: string; name?: string; description?: string }[];
}

export interface LlmGeneratorOptions {
  /** Model name at the endpoint. */
  model: string;
  /** Endpoint base URL, e.g. https://api.openai.com/v1. Default: the SDK's (OPENAI_BASE_URL or OpenAI). */
  baseURL?: string;
  /** API key. Default: OPENAI_API_KEY. */
  apiKey?: string;
  /** Scenarios wanted. Default 24. */
  count?: number;
  /** The user's own guidance, appended to the prompt. */
  instructions?: string;
  /** Passed to the endpoint as `seed` (best effort; not every endpoint honours it). */
  seed?: number;
  /** Requests (not counting the SDK's HTTP retries) before giving up. Default 6. */
  maxAttempts?: number;
  /** Per-request timeout in ms. Default DEFAULT_GENERATOR_TIMEOUT_MS. */
  timeoutMs?: number;
  /** SDK retries on 5xx / 429 / network errors, per request. Default 2. */
  maxRetries?: number;
  /** Near-duplicate threshold (see dedup.ts). Default 0.8. */
  duplicateThreshold?: number;
  /** Tasks to avoid (e.g. another scenario set's), as near-duplicates. */
  avoidTasks?: Iterable<string>;
  /** Use this client instead of building one (tests, custom fetch). */
  client?: OpenAI;
  /**
   * Grounds the tasks in the server: `entities` go into the prompt, and `check` replays each item's solution (see
   * grounded.ts). Without it items are kept as they come, with no checks.
   */
  ground?: {
    entities: readonly DiscoveredEntity[];
    check(task: string, solution: Solution | undefined): Promise<Grounding>;
  };
}

export type ResponseFormatMode = 'json_schema' | 'json_object' | 'text';

export interface LlmResult {
  scenarios: Scenario[];
  droppedDuplicates: number;
  /** Items (or whole answers) that failed validation. */
  droppedInvalid: number;
  /** Grounded generation: items whose solution's replay did not show them feasible, by reason. */
  droppedInfeasible: InfeasibleCounts;
  /** Chat completion requests made. */
  attempts: number;
  /** The response format that finally worked. */
  responseFormat: ResponseFormatMode;
}

/**
 * One call of a task's intended solution. Strict json_schema mode allows no free-form object, so `arguments` is asked
 * for as a JSON string (as OpenAI's own tool calls send it); an object is taken too.
 */
const SolutionCallSchema = z.object({
  tool: z.string().min(1),
  arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).transform((a, ctx) => {
    if (typeof a !== 'string') return a;
    try {
      const v: unknown = JSON.parse(a.trim() === '' ? '{}' : a);
      if (v !== null && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
    } catch {
      // reported below
    }
    ctx.addIssue({ code: 'custom', message: 'arguments is not a JSON object' });
    return z.NEVER;
  }),
});

/** A task's intended solution: the tool calls in order, and the values the final answer must contain. */
export const SolutionSchema = z.object({
  calls: z.array(SolutionCallSchema),
  answer_contains: z.array(z.string()).default([]),
});
export type Solution = z.infer<typeof SolutionSchema>;

/** One generated item as the LLM returns it. Lenient on difficulty's type: some models quote numbers. */
export const GeneratedItemSchema = z.object({
  task: z.string().trim().min(8),
  difficulty: z.coerce.number().int().min(1).max(5),
  /** Asked for always; without grounding it is not used. */
  solution: SolutionSchema.optional(),
});

const RESPONSE_JSON_SCHEMA = {
  type: 'object',
  properties: {
    scenarios: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          task: { type: 'string' },
          difficulty: { type: 'integer' },
          solution: {
            type: 'object',
            properties: {
              calls: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: { tool: { type: 'string' }, arguments: { type: 'string', description: 'the arguments as a JSON object' } },
                  required: ['tool', 'arguments'],
                  additionalProperties: false,
                },
              },
              answer_contains: { type: 'array', items: { type: 'string' } },
            },
            required: ['calls', 'answer_contains'],
            additionalProperties: false,
          },
        },
        required: ['task', 'difficulty', 'solution'],
        additionalProperties: false,
      },
    },
  },
  required: ['scenarios'],
  additionalProperties: false,
} as const;

/** Entities shown in the prompt at most, and the longest value shown: the prompt stays a bounded size. */
export const PROMPT_ENTITIES = 80;
const PROMPT_ENTITY_CHARS = 120;

/**
 * The entities for the prompt: taken in turn from each key (so that one long listing does not crowd out the rest),
 * at most PROMPT_ENTITIES, values of at most PROMPT_ENTITY_CHARS characters.
 */
export function promptEntities(entities: readonly DiscoveredEntity[]): DiscoveredEntity[] {
  const byKey = new Map<string, DiscoveredEntity[]>();
  for (const e of entities) {
    if (String(e.value).length > PROMPT_ENTITY_CHARS) continue;
    const xs = byKey.get(e.key) ?? [];
    xs.push(e);
    byKey.set(e.key, xs);
  }
  const out: DiscoveredEntity[] = [];
  for (let i = 0; out.length < PROMPT_ENTITIES && [...byKey.values()].some((xs) => i < xs.length); i++) {
    for (const xs of byKey.values()) if (i < xs.length && out.length < PROMPT_ENTITIES) out.push(xs[i]);
  }
  return out;
}

/** Builds the prompt messages; exported so that the prompt can be inspected and tested. */
export function buildPrompt(
  catalog: ServerCatalog,
  n: number,
  opts: { instructions?: string; avoid?: string[]; entities?: readonly DiscoveredEntity[] } = {},
): OpenAI.Chat.ChatCompletionMessageParam[] {
  const tools = catalog.tools.map((t) => ({
    name: t.name,
    description: t.description,
    input_schema: t.inputSchema,
    read_only: t.annotations.readOnlyHint,
  }));
  const parts = [
    `The MCP server${catalog.serverName ? ` "${catalog.serverName}"` : ''} offers these tools:`,
    JSON.stringify(tools, null, 1),
  ];
  if (catalog.resources?.length) {
    parts.push('And these resources:', JSON.stringify(catalog.resources.slice(0, 50), null, 1));
  }
  const shown = promptEntities(opts.entities ?? []);
  if (shown.length) {
    parts.push(
      'These exist on the server now (found by calling its read-only tools; key = value, and the tool that showed it). Build the tasks on them; never invent ids, names or paths:',
      shown.map((e) => `- ${e.key} = ${JSON.stringify(e.value)} (shown by ${e.tool})`).join('\n'),
    );
  }
  parts.push(
    `Write ${n} realistic, diverse tasks that a user would want done with this server.`,
    [
      'Rules:',
      '- Each task is a self-contained request in the user\'s own words, with the concrete values needed (names, ids, amounts).',
      '- Never name the tools or say which tool to use; describe what the user wants.',
      '- Mix single-step tasks with multi-step ones that need several tool calls (find something, then use it).',
      '- Give each a difficulty from 1 (one obvious call) to 5 (several dependent calls and reasoning); spread them across the range.',
      '- Prefer tasks whose outcome can be checked from the tools\' results; avoid tasks needing information the server cannot give.',
      '- No two tasks may be near-duplicates.',
      '- Give each task its intended solution: the tool calls in order (tool name, and its arguments as a JSON object in a string), and the short values from the tools\' results that the final answer must contain (none for a task that only changes something). The solution is replayed against the server: a task whose calls fail or whose values do not come back is dropped.',
    ].join('\n'),
  );
  if (opts.avoid?.length) parts.push('Do not repeat or paraphrase these existing tasks:\n' + opts.avoid.map((t) => `- ${t}`).join('\n'));
  if (opts.instructions?.trim()) parts.push(`Additional guidance from the user:\n${opts.instructions.trim()}`);
  parts.push(
    'Answer with JSON only, exactly in this shape: {"scenarios": [{"task": "…", "difficulty": 1, "solution": {"calls": [{"tool": "…", "arguments": "{\\"key\\": \\"value\\"}"}], "answer_contains": ["…"]}}]}',
  );
  return [
    { role: 'system', content: 'You design evaluation tasks for AI agents that use MCP tools. You answer with JSON only.' },
    { role: 'user', content: parts.join('\n\n') },
  ];
}

/** Endpoints that do not support a response_format answer 400 (OpenAI-style) or 422 (some proxies). */
function isFormatRejection(err: unknown): boolean {
  return err instanceof OpenAI.APIError && (err.status === 400 || err.status === 422);
}

export function describeApiError(err: unknown, baseURL: string): string {
  if (err instanceof OpenAI.APIConnectionTimeoutError) return `the request to ${baseURL} timed out`;
  if (err instanceof OpenAI.APIConnectionError) return `cannot reach ${baseURL} (${err.message})`;
  if (err instanceof OpenAI.APIError) {
    const hint = err.status === 401 || err.status === 403 ? ' — check the API key (OPENAI_API_KEY or --generator-api-key-env)' : '';
    return `${baseURL} answered HTTP ${err.status ?? '?'}: ${err.message}${hint}`;
  }
  return (err as Error)?.message ?? String(err);
}

/** The generator's client: its endpoint and key, a timeout per request and the SDK's retries (the one place of their defaults). */
export function generatorClient(opts: Pick<LlmGeneratorOptions, 'baseURL' | 'apiKey' | 'timeoutMs' | 'maxRetries'>): OpenAI {
  return new OpenAI({
    baseURL: opts.baseURL,
    apiKey: opts.apiKey ?? process.env.OPENAI_API_KEY ?? 'missing-api-key',
    timeout: opts.timeoutMs ?? DEFAULT_GENERATOR_TIMEOUT_MS,
    maxRetries: opts.maxRetries ?? 2,
  });
}

/** Generates `count` LLM scenarios for a server catalog. */
export async function generateLlmScenarios(catalog: ServerCatalog, opts: LlmGeneratorOptions): Promise<LlmResult> {
  const count = opts.count ?? 24;
  const maxAttempts = opts.maxAttempts ?? 6;
  const client = opts.client ?? generatorClient(opts);
  const baseURL = client.baseURL;
  const filter = new DuplicateFilter(opts.duplicateThreshold ?? DEFAULT_DUPLICATE_THRESHOLD, opts.avoidTasks ?? []);
  const scenarios: Scenario[] = [];
  let mode: ResponseFormatMode = 'json_schema';
  let droppedDuplicates = 0;
  let droppedInvalid = 0;
  const droppedInfeasible: InfeasibleCounts = {};
  let attempts = 0;
  let lastProblem = '';

  while (scenarios.length < count && attempts < maxAttempts) {
    attempts++;
    const missing = count - scenarios.length;
    // Ask for a few extra: some will be invalid or duplicates.
    const ask = missing + Math.ceil(missing / 4);
    const messages = buildPrompt(catalog, ask, { instructions: opts.instructions, avoid: scenarios.map((s) => s.task), entities: opts.ground?.entities });
    const response_format =
      mode === 'json_schema'
        ? ({ type: 'json_schema', json_schema: { name: 'scenarios', strict: true, schema: RESPONSE_JSON_SCHEMA } } as const)
        : mode === 'json_object'
          ? ({ type: 'json_object' } as const)
          : undefined;
    let content: string | null | undefined;
    try {
      const completion = await client.chat.completions.create({
        model: opts.model,
        messages,
        ...(response_format ? { response_format } : {}),
        ...(opts.seed !== undefined ? { seed: opts.seed } : {}),
      });
      content = completion.choices?.[0]?.message?.content;
    } catch (err) {
      if (isFormatRejection(err) && mode !== 'text') {
        // Not a failed attempt: the endpoint told us what it cannot do.
        attempts--;
        mode = mode === 'json_schema' ? 'json_object' : 'text';
        continue;
      }
      throw new ScenarioGenerationError(`scenario generation failed: ${describeApiError(err, baseURL)}`, { cause: err });
    }

    const raw = extractJson(content ?? '');
    if (raw === undefined) {
      droppedInvalid++;
      lastProblem = `answer ${attempts} was not JSON: ${JSON.stringify((content ?? '').slice(0, 120))}`;
      continue;
    }
    const items = Array.isArray(raw) ? raw : (raw as { scenarios?: unknown })?.scenarios;
    if (!Array.isArray(items)) {
      droppedInvalid++;
      lastProblem = `answer ${attempts} had no "scenarios" array`;
      continue;
    }
    for (const item of items) {
      if (scenarios.length >= count) break;
      const parsed = GeneratedItemSchema.safeParse(item);
      if (!parsed.success) {
        droppedInvalid++;
        lastProblem = `answer ${attempts} had an invalid item: ${parsed.error.issues[0]?.path.join('.') || 'item'}: ${parsed.error.issues[0]?.message}`;
        continue;
      }
      if (filter.isDuplicate(parsed.data.task)) {
        droppedDuplicates++;
        continue;
      }
      const grounded = opts.ground ? await opts.ground.check(parsed.data.task, parsed.data.solution) : undefined;
      if (grounded && 'dropped' in grounded) {
        droppedInfeasible[grounded.dropped] = (droppedInfeasible[grounded.dropped] ?? 0) + 1;
        lastProblem = `answer ${attempts} had an infeasible task (${grounded.dropped}${grounded.detail ? `: ${grounded.detail}` : ''})`;
        continue;
      }
      filter.add(parsed.data.task);
      scenarios.push({
        id: `llm-${hashString(parsed.data.task).toString(16).padStart(8, '0')}`,
        task: parsed.data.task,
        difficulty: parsed.data.difficulty,
        source: 'llm',
        ...(grounded ? { checks: grounded.checks } : {}),
      });
    }
  }

  if (scenarios.length < count) {
    throw new ScenarioGenerationError(
      `scenario generation got ${scenarios.length} of ${count} valid scenarios from ${opts.model} at ${baseURL} after ${attempts} requests ` +
        `(${droppedInvalid} invalid, ${droppedDuplicates} duplicates${infeasibleText(droppedInfeasible)})${lastProblem ? `; last problem: ${lastProblem}` : ''}`,
    );
  }
  return { scenarios, droppedDuplicates, droppedInvalid, droppedInfeasible, attempts, responseFormat: mode };
}

function infeasibleText(counts: InfeasibleCounts): string {
  const text = formatInfeasible(counts);
  return text ? `, infeasible: ${text}` : '';
}
