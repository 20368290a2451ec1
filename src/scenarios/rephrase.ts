/**
 * An LLM's rewording of offline tasks (`mcprl scenarios --offline --generator-model M`): the schema-made tasks are
 * right but read alike; a model may say each in other words. Only the wording changes, never the checks, so a
 * rewording is kept only when it still asks exactly what the checks judge: every value the task states is there as
 * written, no value is added, no tool or argument key is named, and it is one short request. Otherwise the generated
 * wording stays. An endpoint that fails stops the rewording, never the set: the tasks not yet reworded keep theirs.
 */
import type OpenAI from 'openai';
import { z } from 'zod';
import { extractJson } from '../util/extract-json.js';
import { describeApiError, generatorClient, type LlmGeneratorOptions } from './llm.js';
import { toolNaming, type NamedTool } from './naming.js';
import { checkedCalls, type Scenario } from './scenario.js';

/** Tasks sent in one request: a reply stays short, and one bad reply costs few rewordings. */
export const REPHRASE_BATCH = 12;

/** Why a rewording was refused (the task keeps its generated wording). */
export const REFUSAL_REASONS = ['missing', 'empty', 'too_long', 'drops_value', 'adds_value', 'names_tool'] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

const count = z.number().int().nonnegative();

/** What the rewording did: `mcprl scenarios` prints it and `--json` carries it as the summary's `rephrasing`. */
export const RephrasingSchema = z.object({
  /** The model that reworded. */
  model: z.string(),
  /** Tasks now in the model's words. */
  kept: count,
  /** Rewordings refused, each task keeping its generated wording. */
  refused: count,
  /** Refusals by reason: missing (no rewording came back), empty, too_long, drops_value, adds_value, names_tool. */
  refusedBy: z.partialRecord(z.enum(REFUSAL_REASONS), count),
  /** Why the rewording stopped early (the endpoint failed); the tasks not yet reworded keep their wording. */
  failed: z.string().optional(),
});
export type Rephrasing = z.infer<typeof RephrasingSchema>;

export type RephraseOptions = Pick<LlmGeneratorOptions, 'model' | 'baseURL' | 'apiKey' | 'timeoutMs' | 'maxRetries' | 'seed' | 'client'>;

const ReplySchema = z.union([
  z.object({ tasks: z.array(z.object({ id: z.string(), task: z.string() })) }),
  z.array(z.object({ id: z.string(), task: z.string() })).transform((tasks) => ({ tasks })),
]);

function prompt(batch: readonly Scenario[], tools: readonly NamedTool[]): OpenAI.Chat.ChatCompletionMessageParam[] {
  const system = [
    'You reword tasks that a user gives an AI assistant which can call the tools of a server.',
    'Reword each task as a person would write it: plain, natural English, one or two sentences, asking the same thing.',
    'Keep every value exactly as written: quoted text stays in its double quotes, unchanged; names, ids, paths, numbers, units and places stay as they are.',
    'Add no value and no detail, leave nothing out, and never mention a tool, a function or an argument name.',
    `The tools (never name them): ${tools.map((t) => t.name).join(', ')}.`,
    'Answer with JSON only: {"tasks": [{"id": "<the id>", "task": "<the reworded task>"}]}, one entry per task.',
  ].join('\n');
  return [
    { role: 'system', content: system },
    { role: 'user', content: JSON.stringify({ tasks: batch.map((s) => ({ id: s.id, task: s.task })) }) },
  ];
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const quoted = (text: string) => [...text.matchAll(/"([^"]+)"/g)].map((m) => m[1]);
/** Words holding a digit outside quotes ("bk-014", "41.3", "2"), without the punctuation around them. */
const numberWords = (text: string) =>
  text.replace(/"[^"]*"/g, ' ').split(/\s+/).map((w) => w.replace(/^[(,;:!?'.]+|[),;:!?'.]+$/g, '')).filter((w) => /\d/.test(w));
/** Whether `text` holds `value` as written, not inside a longer word or number ("41" is not in "413"). */
const holds = (text: string, value: string) => new RegExp(`(^|[^\\w])${escapeRegExp(value)}($|[^\\w.]|\\.(?!\\d))`, 'i').test(text);

/** The values a task states: its quoted text, its words with digits, and the values of its checked calls it names. */
function statedValues(s: Scenario): string[] {
  const args = (v: unknown): string[] =>
    typeof v === 'string' || typeof v === 'number' ? [String(v)] : Array.isArray(v) ? v.flatMap(args) : v && typeof v === 'object' ? Object.values(v).flatMap(args) : [];
  const fromChecks = checkedCalls(s.checks ?? []).flatMap((c) => args(c.args)).filter((v) => v.trim().length >= 2 && holds(s.task, v));
  return [...new Set([...quoted(s.task), ...numberWords(s.task), ...fromChecks])];
}

/** Why `reworded` cannot stand for the task `s`, or undefined when it can. */
export function rewordingProblem(s: Scenario, reworded: string | undefined, tools: readonly NamedTool[]): RefusalReason | undefined {
  if (reworded === undefined) return 'missing';
  const text = reworded.trim();
  if (!text) return 'empty';
  if (/\n/.test(text) || text.length > Math.max(2 * s.task.length, s.task.length + 80)) return 'too_long';
  if (statedValues(s).some((v) => !holds(text, v))) return 'drops_value';
  // A value the task did not state changes what is asked; an answer stated gives it away.
  const answers = (s.checks ?? []).flatMap((c) => (c.kind === 'answer_contains' || c.kind === 'answer_value' ? [String(c.value)] : []));
  if (quoted(text).some((q) => !s.task.includes(q)) || answers.some((a) => a.trim().length >= 2 && holds(text, a) && !holds(s.task, a))) return 'adds_value';
  if (toolNaming(text, tools) !== undefined) return 'names_tool';
  return undefined;
}

/**
 * Asks the model to reword every task, REPHRASE_BATCH at a time, and keeps each rewording that passes
 * rewordingProblem. The scenarios come back in order, with their ids and checks as they were.
 */
export async function rephraseTasks(
  scenarios: readonly Scenario[],
  tools: readonly NamedTool[],
  opts: RephraseOptions,
): Promise<{ scenarios: Scenario[]; rephrasing: Rephrasing }> {
  const client = opts.client ?? generatorClient(opts);
  const out = [...scenarios];
  const rephrasing: Rephrasing = { model: opts.model, kept: 0, refused: 0, refusedBy: {} };
  for (let at = 0; at < scenarios.length; at += REPHRASE_BATCH) {
    const batch = scenarios.slice(at, at + REPHRASE_BATCH);
    let content: string | null | undefined;
    try {
      const completion = await client.chat.completions.create({
        model: opts.model,
        messages: prompt(batch, tools),
        ...(opts.seed !== undefined ? { seed: opts.seed } : {}),
      });
      content = completion.choices?.[0]?.message?.content;
    } catch (err) {
      rephrasing.failed = describeApiError(err, client.baseURL);
      break;
    }
    const reply = ReplySchema.safeParse(extractJson(content ?? ''));
    const byId = new Map(reply.success ? reply.data.tasks.map((t) => [t.id, t.task]) : []);
    batch.forEach((s, i) => {
      const reworded = byId.get(s.id);
      const problem = rewordingProblem(s, reworded, tools);
      if (problem) {
        rephrasing.refused++;
        rephrasing.refusedBy[problem] = (rephrasing.refusedBy[problem] ?? 0) + 1;
      } else {
        rephrasing.kept++;
        out[at + i] = { ...s, task: reworded!.trim() };
      }
    });
  }
  return { scenarios: out, rephrasing };
}

/** One line for people: "by M: 20 kept, 4 refused (3 drops_value, 1 names_tool)", and why it stopped, if it did. */
export function formatRephrasing(r: Rephrasing): string {
  const reasons = Object.entries(r.refusedBy).map(([k, n]) => `${n} ${k}`).join(', ');
  const stopped = r.failed ? `; stopped: ${r.failed} (the other tasks keep their generated wording)` : '';
  return `by ${r.model}: ${r.kept} kept, ${r.refused} refused${reasons ? ` (${reasons})` : ''}${stopped}`;
}
