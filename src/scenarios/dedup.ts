/**
 * Near-duplicate detection for scenario tasks.
 *
 * Two tasks are near-duplicates when they mention the same concrete values (tokens containing a digit:
 * ids, amounts, years) and their content words overlap by at least `threshold` (Jaccard, after dropping
 * stop words). Requiring the same concrete values keeps "price of bk-001" and "price of bk-002" apart —
 * they are different tasks — while paraphrases of one request ("Find the books by X" / "Find books by X")
 * collapse to one.
 */

const STOP_WORDS = new Set(
  ('a an and are as at be by can could do does for from give how i in is it its me my of on or please ' +
    'show tell that the their them this to was what which who with would you your')
    .split(' '),
);

/** Lower case, NFKC, punctuation removed except inside tokens such as "bk-001", "12.5" or an email. */
export function normalizeTask(text: string): string {
  return tokenize(text).join(' ');
}

function tokenize(text: string): string[] {
  return text
    .normalize('NFKC')
    .toLowerCase()
    .split(/[^\p{L}\p{N}@_.-]+/u)
    .map((t) => t.replace(/^[.\-_]+|[.\-_]+$/g, ''))
    .filter(Boolean);
}

/** What near-duplicate detection compares: a task's content words and its concrete values (sorted, joined). */
export interface TaskSignature {
  words: Set<string>;
  concrete: string;
}

export function taskSignature(text: string): TaskSignature {
  const tokens = tokenize(text);
  return {
    words: new Set(tokens.filter((t) => !STOP_WORDS.has(t))),
    concrete: tokens.filter((t) => /\d/.test(t)).sort().join(' '),
  };
}

function jaccard(a: Set<string>, b: Set<string>): number {
  if (a.size === 0 && b.size === 0) return 1;
  let inter = 0;
  for (const x of a) if (b.has(x)) inter++;
  return inter / (a.size + b.size - inter);
}

/** Similarity in [0, 1]; 0 whenever the concrete values differ. */
export function taskSimilarity(a: string, b: string): number {
  return signatureSimilarity(taskSignature(a), taskSignature(b));
}

function signatureSimilarity(a: TaskSignature, b: TaskSignature): number {
  return a.concrete === b.concrete ? jaccard(a.words, b.words) : 0;
}

/**
 * The near-duplicate rule, the one every caller applies (this filter, and the overlap index of disjoint.ts that the
 * splitter and the held-out check share): the same concrete values and content words overlapping by `threshold`.
 */
export function isNearDuplicate(a: TaskSignature, b: TaskSignature, threshold = DEFAULT_DUPLICATE_THRESHOLD): boolean {
  return signatureSimilarity(a, b) >= threshold;
}

/** Default similarity at or above which two tasks count as the same. */
export const DEFAULT_DUPLICATE_THRESHOLD = 0.8;

/**
 * Incremental near-duplicate filter: `add` returns false (and keeps nothing) for a task too similar to one
 * already added or to one of `against` (for example tasks of another, disjoint scenario set).
 */
export class DuplicateFilter {
  private readonly seen: TaskSignature[] = [];
  constructor(
    private readonly threshold = DEFAULT_DUPLICATE_THRESHOLD,
    against: Iterable<string> = [],
  ) {
    for (const t of against) this.seen.push(taskSignature(t));
  }

  isDuplicate(task: string): boolean {
    const s = taskSignature(task);
    return this.seen.some((o) => isNearDuplicate(o, s, this.threshold));
  }

  add(task: string): boolean {
    if (this.isDuplicate(task)) return false;
    this.seen.push(taskSignature(task));
    return true;
  }
}

/** Keeps the first of every group of near-duplicates, in order; reports how many were dropped. */
export function dropNearDuplicates<T>(
  items: readonly T[],
  text: (item: T) => string,
  threshold = DEFAULT_DUPLICATE_THRESHOLD,
): { kept: T[]; dropped: number } {
  const filter = new DuplicateFilter(threshold);
  const kept = items.filter((it) => filter.add(text(it)));
  return { kept, dropped: items.length - kept.length };
}
