/**
 * Held-out means held out: validation scenarios must share neither an entity nor a task with the scenarios a
 * model trained on (RL training scenarios, and the warm-up tasks recorded with a bundled model). Otherwise a
 * rise in validation success could be memorisation. Two scenarios overlap when their first checked calls are the
 * same call (the entity the task is about) or when their tasks are near-duplicates (dedup.ts's rule).
 *
 * That rule lives here once, in OverlapIndex: the held-out check (findOverlaps) asks it, and so does the splitter
 * (split.ts, through overlapGroups), which keeps overlapping scenarios on one side; so a generated set always
 * passes the check. The index makes both linear in the sets' sizes: entities are a Map lookup, and near-duplicate
 * tasks are found by prefix filtering (below) instead of comparing every pair.
 */
import { DEFAULT_DUPLICATE_THRESHOLD, isNearDuplicate, taskSignature, type TaskSignature } from './dedup.js';
import { canonical } from './offline/index.js';
import { checkedCalls, type Scenario } from './scenario.js';
import { McprlError } from '../util/errors.js';
import type { OnProgress } from '../util/progress.js';

/** The arguments of a scenario's first checked call (a tool_called check's, or an answer_value's first `via`), canonically serialised; undefined without one. */
export function entityKey(s: Pick<Scenario, 'checks'>): string | undefined {
  const first = checkedCalls(s.checks ?? [])[0];
  return first ? `${first.tool}${canonical(first.args)}` : undefined;
}

export interface Overlap {
  heldOut: Scenario;
  other: Pick<Scenario, 'id' | 'task'>;
  otherSet: string;
  reason: 'task' | 'entity';
}

type Indexed = Pick<Scenario, 'id' | 'task' | 'checks'>;

/** How often (in scenarios) the overlap phases report progress. */
const PROGRESS_EVERY = 4096;

/** The key of the empty word set (a task of stop words alone), which only another empty set can match. */
const NO_WORDS = '\u0001';

/**
 * The scenarios of one set, indexed for the overlap rule: `find` returns the indexed scenarios that overlap a given
 * one, in the set's order, without looking at the others.
 *
 * Near-duplicate tasks are found by prefix filtering (as in All-Pairs, Bayardo et al. 2007): order every word by how
 * many indexed tasks hold it (rarest first). Two word sets A, B with Jaccard similarity ≥ t share o ≥ ⌈t·|A|⌉
 * words, and A's first |A| − ⌈t·|A|⌉ + k words in that order hold the k rarest of the shared words (at most
 * |A| − o words of A are not shared), as do B's. With t > 1/2 every match of sets of two words or more shares two
 * words, so the index keys are the pairs of words in those prefixes of length |A| − ⌈t·|A|⌉ + 2 (one word for a
 * one-word task), under the task's concrete values (which must be equal anyway). A query is compared, with the exact
 * rule (isNearDuplicate), only with the tasks found under its own keys: nothing that overlaps is missed, and common
 * words alone (the field names of a thousand lookups) never make a candidate.
 */
export class OverlapIndex<T extends Indexed = Indexed> {
  // A key's scenarios: one index, or several (most keys have one; an array each would double the garbage).
  private readonly byEntity = new Map<string, Postings>();
  private readonly byPrefixKey = new Map<string, Postings>();
  private readonly signatures: TaskSignature[] = [];
  /** In how many indexed tasks each word occurs (the word order of the prefixes). */
  private readonly frequency = new Map<string, number>();

  constructor(
    readonly items: readonly T[],
    readonly threshold = DEFAULT_DUPLICATE_THRESHOLD,
    onProgress?: OnProgress,
  ) {
    if (!(threshold > 0.5 && threshold <= 1)) throw new RangeError(`the overlap index needs a near-duplicate threshold in (0.5, 1], got ${threshold}`);
    for (const s of items) {
      const sig = taskSignature(s.task);
      this.signatures.push(sig);
      for (const w of sig.words) this.frequency.set(w, (this.frequency.get(w) ?? 0) + 1);
    }
    items.forEach((s, i) => {
      const k = entityKey(s);
      if (k !== undefined) push(this.byEntity, k, i);
      for (const k of this.prefixKeys(this.signatures[i])) push(this.byPrefixKey, k, i);
      if (onProgress && (i + 1) % PROGRESS_EVERY === 0) onProgress(i + 1, items.length);
    });
    onProgress?.(items.length, items.length);
  }

  /** A task's index keys (see the class comment): pairs of its prefix words, under its concrete values. */
  private prefixKeys(sig: TaskSignature): string[] {
    const c = sig.concrete;
    if (sig.words.size === 0) return [`${c}\u0000${NO_WORDS}`];
    if (sig.words.size === 1) return [`${c}\u0000${[...sig.words][0]}`];
    const words = [...sig.words].sort((a, b) => (this.frequency.get(a) ?? 0) - (this.frequency.get(b) ?? 0) || (a < b ? -1 : a > b ? 1 : 0));
    // The epsilon only lengthens a prefix (never misses a pair) where t·|A| lands a rounding error above an integer.
    const shared = Math.ceil(this.threshold * words.length - 1e-9);
    const prefix = words.slice(0, Math.min(words.length, words.length - shared + 2));
    const keys: string[] = [];
    for (let i = 0; i < prefix.length; i++) for (let j = i + 1; j < prefix.length; j++) keys.push(`${c}\u0000${prefix[i]}\u0000${prefix[j]}`);
    return keys;
  }

  /**
   * The indexed scenarios that overlap `s`, in the set's order, each once, with the reason (an entity match wins
   * over a task match). `except` leaves one index out (a scenario of the indexed set asking about itself).
   */
  find(s: Pick<Scenario, 'task' | 'checks'>, except = -1): { index: number; item: T; reason: 'entity' | 'task' }[] {
    const found = new Map<number, 'entity' | 'task'>();
    const k = entityKey(s);
    if (k !== undefined) for (const i of postings(this.byEntity.get(k))) if (i !== except) found.set(i, 'entity');
    const sig = taskSignature(s.task);
    for (const key of this.prefixKeys(sig)) {
      for (const i of postings(this.byPrefixKey.get(key))) {
        if (i !== except && !found.has(i) && isNearDuplicate(sig, this.signatures[i], this.threshold)) found.set(i, 'task');
      }
    }
    return [...found].sort((a, b) => a[0] - b[0]).map(([index, reason]) => ({ index, item: this.items[index], reason }));
  }
}

type Postings = number | number[];

function push(m: Map<string, Postings>, k: string, i: number): void {
  const xs = m.get(k);
  if (xs === undefined) m.set(k, i);
  else if (typeof xs === 'number') {
    if (xs !== i) m.set(k, [xs, i]);
  } else if (xs[xs.length - 1] !== i) xs.push(i);
}

function postings(p: Postings | undefined): readonly number[] {
  return p === undefined ? [] : typeof p === 'number' ? [p] : p;
}

/**
 * The scenarios grouped so that any two that overlap (OverlapIndex's rule), directly or through others, share a
 * group: each group is a list of indices into `scenarios`, ascending, and the groups come in the order of their
 * first scenario. The splitter puts each group on one side.
 */
export function overlapGroups(scenarios: readonly Indexed[], threshold = DEFAULT_DUPLICATE_THRESHOLD): number[][] {
  const index = new OverlapIndex(scenarios, threshold);
  const parent = scenarios.map((_, i) => i);
  const root = (i: number): number => {
    while (parent[i] !== i) i = parent[i] = parent[parent[i]];
    return i;
  };
  scenarios.forEach((s, i) => {
    for (const { index: j } of index.find(s, i)) {
      const [a, b] = [root(i), root(j)];
      if (a !== b) parent[Math.max(a, b)] = Math.min(a, b);
    }
  });
  const groups = new Map<number, number[]>();
  scenarios.forEach((_, i) => {
    const r = root(i);
    const g = groups.get(r);
    if (g) g.push(i);
    else groups.set(r, [i]);
  });
  return [...groups.values()];
}

/** The units of work findOverlaps reports progress in: each other set's scenarios indexed, then the held-out checked against it. */
export function overlapCheckUnits(heldOut: readonly unknown[], others: Record<string, readonly unknown[]>): number {
  return heldOut.length === 0 ? 0 : Object.values(others).reduce((n, set) => n + (set.length === 0 ? 0 : set.length + heldOut.length), 0);
}

/**
 * Every overlap between the held-out scenarios and each named other set: for each held-out scenario and set, the
 * first scenario of that set it overlaps (an entity match before a task match). `onProgress` counts the scenarios
 * indexed and checked, over all the sets.
 */
export function findOverlaps(
  heldOut: readonly Scenario[],
  others: Record<string, readonly Indexed[]>,
  threshold = DEFAULT_DUPLICATE_THRESHOLD,
  onProgress?: OnProgress,
): Overlap[] {
  const out: Overlap[] = [];
  const total = overlapCheckUnits(heldOut, others);
  if (total === 0) {
    onProgress?.(0, 0);
    return out;
  }
  let before = 0;
  const report = (done: number) => onProgress?.(before + done, total);
  for (const [name, set] of Object.entries(others)) {
    if (set.length === 0) continue;
    const index = new OverlapIndex(set, threshold, onProgress && report);
    before += set.length;
    heldOut.forEach((v, i) => {
      const found = index.find(v);
      const hit = found.find((f) => f.reason === 'entity') ?? found[0];
      if (hit) out.push({ heldOut: v, other: hit.item, otherSet: name, reason: hit.reason });
      if ((i + 1) % PROGRESS_EVERY === 0) report(i + 1);
    });
    before += heldOut.length;
    report(0);
  }
  return out;
}

/**
 * Throws McprlError SCENARIO_OVERLAP saying which sets overlap (and how many scenarios each), the first few
 * overlaps, and `advice(overlaps)`: what to use instead, in the caller's words.
 */
export function assertDisjoint(
  heldOutName: string,
  heldOut: readonly Scenario[],
  others: Record<string, readonly Pick<Scenario, 'id' | 'task' | 'checks'>[]>,
  advice?: (overlaps: Overlap[]) => string,
  onProgress?: OnProgress,
): void {
  const overlaps = findOverlaps(heldOut, others, DEFAULT_DUPLICATE_THRESHOLD, onProgress);
  if (overlaps.length === 0) return;
  const bySet = Object.keys(others)
    .map((name) => [name, new Set(overlaps.filter((o) => o.otherSet === name).map((o) => o.heldOut.id)).size] as const)
    .filter(([, n]) => n > 0)
    .map(([name, n]) => `${n} with ${name}`);
  const shown = overlaps.slice(0, 3).map((o) =>
    o.reason === 'entity'
      ? `${heldOutName} scenario ${o.heldOut.id} is about the same entity as ${o.otherSet} scenario ${o.other.id} (${entityKey(o.heldOut)})`
      : `${heldOutName} scenario ${o.heldOut.id} ("${o.heldOut.task}") near-duplicates ${o.otherSet} scenario ${o.other.id} ("${o.other.task}")`,
  );
  const ids = new Set(overlaps.map((o) => o.heldOut.id)).size;
  throw new McprlError(
    'SCENARIO_OVERLAP',
    `${ids} ${heldOutName} scenario(s) overlap other sets (${bySet.join(', ')}), so a gain on them could be memorisation: ` +
      `${shown.join('; ')}${overlaps.length > 3 ? '; …' : ''}${advice ? `. ${advice(overlaps)}` : ''}`,
  );
}
