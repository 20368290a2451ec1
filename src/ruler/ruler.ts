import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { writeFileAtomic } from '../util/atomic.js';
import { extractJson } from '../util/extract-json.js';
import { JudgeError, OpenAIJudge, type JudgeClient } from './judge.js';
import { DEFAULT_RUBRIC, RULER_RESPONSE_SCHEMA, buildRulerPrompt, judgeKey, type JudgedTrajectory } from './prompt.js';

const JudgeAnswerSchema = z.object({
  scores: z.array(
    z.object({
      // Judges sometimes write ids as numbers; both name the same trajectory.
      trajectory_id: z.union([z.string(), z.number()]).transform(String),
      explanation: z.string().default(''),
      score: z.number().min(0).max(1),
    }),
  ),
});

/** Time one group may spend on the judge, attempts and waits together, in milliseconds. */
export const DEFAULT_JUDGE_RETRY_BUDGET_MS = 300_000;

export interface RulerOptions {
  judge: JudgeClient | { baseURL: string; model: string; apiKey?: string };
  /** Grading standards. Default DEFAULT_RUBRIC. */
  rubric?: string;
  /** Folder for cached judge answers, keyed by a hash of the request. Default: no cache. */
  cacheDir?: string;
  /** Extra attempts after the first on retryable failures. Default 3. */
  maxRetries?: number;
  /** First backoff delay in milliseconds, doubled per retry (capped at 30 s). Default 1000. */
  backoffMs?: number;
  /**
   * Total time one group may spend on the judge, attempts and waits together, in milliseconds: a retry that would
   * start after it (a long Retry-After included) is not made. Default DEFAULT_JUDGE_RETRY_BUDGET_MS.
   */
  retryBudgetMs?: number;
  signal?: AbortSignal;
}

export type RulerResult =
  | {
      scores: number[];
      explanations: string[];
      /** Judge requests made (0 when answered from the cache). */
      attempts: number;
      cached: boolean;
    }
  | { skipped: true; reason: string; attempts: number };

/**
 * Scores a group of trajectories that share one goal with an LLM judge (RULER). Identical trajectories are
 * judged once and share the score. Bad answers, wrong counts, 429 and 5xx are retried with backoff; if every
 * attempt fails the group is reported as skipped — this never throws for judge failures.
 */
export async function rulerScores(group: JudgedTrajectory[], opts: RulerOptions): Promise<RulerResult> {
  if (group.length === 0) return { skipped: true, reason: 'empty group', attempts: 0 };
  const judge: JudgeClient = 'complete' in opts.judge ? opts.judge : new OpenAIJudge(opts.judge);

  // Identical trajectories cannot be ranked against each other: judge each distinct one once.
  const keyIndex = new Map<string, number>();
  const unique: JudgedTrajectory[] = [];
  const slot = group.map((t) => {
    const k = judgeKey(t);
    let i = keyIndex.get(k);
    if (i === undefined) {
      i = unique.length;
      keyIndex.set(k, i);
      unique.push(t);
    }
    return i;
  });

  const prompt = buildRulerPrompt(unique, opts.rubric ?? DEFAULT_RUBRIC);
  const request = { messages: prompt.messages, jsonSchema: { name: 'ruler_scores', schema: RULER_RESPONSE_SCHEMA } };
  const cacheFile = opts.cacheDir
    ? path.join(opts.cacheDir, `${hashRequest(judge.model, request)}.json`)
    : undefined;

  const spread = (scores: number[], explanations: string[], attempts: number, cached: boolean): RulerResult => ({
    scores: slot.map((i) => scores[i]),
    explanations: slot.map((i) => explanations[i]),
    attempts,
    cached,
  });

  if (cacheFile) {
    const hit = await readCache(cacheFile, unique.length);
    if (hit) return spread(hit.scores, hit.explanations, 0, true);
  }

  const maxRetries = opts.maxRetries ?? 3;
  const backoffMs = opts.backoffMs ?? 1000;
  const budgetMs = opts.retryBudgetMs ?? DEFAULT_JUDGE_RETRY_BUDGET_MS;
  const started = Date.now();
  let lastError: JudgeError | undefined;
  let attempts = 0;
  let outOfBudget = '';
  for (let attempt = 0; attempt <= maxRetries; attempt++) {
    if (attempt > 0) {
      // The endpoint's Retry-After, when it sent one, else exponential backoff.
      const wait = lastError?.retryAfterMs ?? Math.min(backoffMs * 2 ** (attempt - 1), 30_000);
      if (Date.now() - started + wait > budgetMs) {
        outOfBudget = ` (a retry after ${Math.round(wait / 1000)} s${lastError?.retryAfterMs !== undefined ? ', as Retry-After asked,' : ''} would exceed the retry budget of ${Math.round(budgetMs / 1000)} s)`;
        break;
      }
      try {
        await sleep(wait, undefined, { signal: opts.signal });
      } catch {
        break;
      }
    }
    attempts++;
    try {
      const text = await judge.complete({ ...request, signal: opts.signal });
      const parsed = parseJudgeAnswer(text, prompt.ids);
      if (cacheFile) await writeFileAtomic(cacheFile, JSON.stringify({ model: judge.model, ...parsed, raw: text }, null, 2));
      return spread(parsed.scores, parsed.explanations, attempts, false);
    } catch (err) {
      lastError = err instanceof JudgeError ? err : new JudgeError('JUDGE_INVALID_OUTPUT', String(err), { cause: err });
      if (!lastError.retryable || opts.signal?.aborted) break;
    }
  }
  return {
    skipped: true,
    reason: `judge failed after ${attempts} attempt(s): ${lastError?.code ?? 'JUDGE_UNREACHABLE'}: ${lastError?.message ?? 'aborted'}${outOfBudget}`,
    attempts,
  };
}

/**
 * Reads the judge's answer: JSON as asked, or JSON inside a code fence or surrounded by prose, or a bare array
 * of score objects. Throws JudgeError when no valid answer for exactly `ids` can be found.
 */
export function parseJudgeAnswer(text: string, ids: string[]): { scores: number[]; explanations: string[] } {
  const value = extractJson(text);
  if (value === undefined) {
    throw new JudgeError('JUDGE_INVALID_OUTPUT', `judge answer is not JSON: ${text.slice(0, 200)}`);
  }
  const parsed = JudgeAnswerSchema.safeParse(Array.isArray(value) ? { scores: value } : value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new JudgeError('JUDGE_INVALID_OUTPUT', `judge answer has the wrong shape at ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  const byId = new Map<string, { score: number; explanation: string }>();
  for (const s of parsed.data.scores) {
    const id = s.trajectory_id.trim();
    if (byId.has(id)) throw new JudgeError('JUDGE_WRONG_COUNT', `judge scored trajectory ${id} twice`);
    byId.set(id, { score: s.score, explanation: s.explanation });
  }
  const missing = ids.filter((id) => !byId.has(id));
  const extra = [...byId.keys()].filter((id) => !ids.includes(id));
  if (missing.length > 0 || extra.length > 0) {
    throw new JudgeError(
      'JUDGE_WRONG_COUNT',
      `judge scored ${byId.size} of ${ids.length} trajectories` +
        (missing.length ? `; missing ids ${missing.join(', ')}` : '') +
        (extra.length ? `; unknown ids ${extra.join(', ')}` : ''),
    );
  }
  return {
    scores: ids.map((id) => byId.get(id)!.score),
    explanations: ids.map((id) => byId.get(id)!.explanation),
  };
}

function hashRequest(model: string, request: unknown): string {
  return createHash('sha256').update(JSON.stringify({ model, request })).digest('hex');
}

const CacheEntrySchema = z.object({ scores: z.array(z.number()), explanations: z.array(z.string()) });

async function readCache(file: string, n: number): Promise<{ scores: number[]; explanations: string[] } | undefined> {
  try {
    const entry = CacheEntrySchema.safeParse(JSON.parse(await readFile(file, 'utf8')));
    if (entry.success && entry.data.scores.length === n && entry.data.explanations.length === n) return entry.data;
  } catch {
    // A missing or unreadable entry is a cache miss.
  }
  return undefined;
}
