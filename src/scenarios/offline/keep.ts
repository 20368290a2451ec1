/**
 * Keeping candidates: the partition and exclusion filters, duplicates, the replay, and the checks a kept one is
 * written with.
 */
import { DEFAULT_DUPLICATE_THRESHOLD, DuplicateFilter } from '../dedup.js';
import { numberValue } from '../numbers.js';
import { answerContains, normalizeAnswerText, valueAnswerChecks, type Check, type Scenario } from '../scenario.js';
import { hashString } from '../../util/rng.js';
import { canonical } from './arguments.js';
import type { Discovery } from './discovery.js';
import type { Generation } from './generation.js';
import { replayChecks } from './replay.js';
import type { Candidate, Drawn } from './types.js';
import { scalarArgValues } from './values.js';

/** At most this many other entities' values are kept per answer_value check (enough to catch a pasted listing). */
const MAX_OTHERS = 40;

/** The scenarios kept so far, and how many candidates were dropped and why. */
export class Keeper {
  readonly scenarios: Scenario[] = [];
  droppedDuplicates = 0;
  droppedUnverifiable = 0;
  droppedExcluded = 0;
  private readonly excludedEntities: Set<string>;
  private readonly dupFilter: DuplicateFilter;
  private readonly seenChecks = new Set<string>();

  constructor(
    private readonly g: Generation,
    private readonly known: Discovery,
  ) {
    this.excludedEntities = new Set([...(g.opts.exclude?.entities ?? [])].map((e) => e.trim().toLowerCase()));
    this.dupFilter = new DuplicateFilter(g.opts.duplicateThreshold ?? DEFAULT_DUPLICATE_THRESHOLD, g.opts.exclude?.tasks ?? []);
  }

  /** Keeps a candidate if it passes every filter and its replay; says whether it was kept. */
  async consider(c: Drawn): Promise<boolean> {
    if (c === undefined) return false;
    if (c === 'unverifiable') {
      this.droppedUnverifiable++;
      return false;
    }
    const partition = this.g.partition;
    const firstCall = c.checks.find((k) => k.kind === 'tool_called');
    const entityKey = canonical(firstCall?.kind === 'tool_called' ? firstCall.args : {});
    if (partition && hashString(entityKey) % partition.of !== partition.index) {
      this.droppedExcluded++;
      return false;
    }
    if (this.excludedEntities.size && [...scalarArgValues(c.checks.map((k) => (k.kind === 'tool_called' ? k.args : k.value)))].some((v) => this.excludedEntities.has(v))) {
      this.droppedExcluded++;
      return false;
    }
    // A value the task already states is no test of the agent.
    const taskNorm = c.task.toLowerCase();
    if (c.checks.some((k) => k.kind === 'answer_contains' && answerContains(taskNorm, k.value))) return false;
    const checksKey = canonical(c.checks.map((k) => (k.kind === 'tool_called' ? { tool: k.tool, args: k.args } : k.value)));
    const calledTools = c.checks.flatMap((k) => (k.kind === 'tool_called' ? [k.tool] : []));
    if (this.seenChecks.has(checksKey) || this.dupFilter.isDuplicate(c.task)) {
      this.droppedDuplicates++;
      for (const t of calledTools) this.g.note(t, 'only_duplicates');
      return false;
    }
    const outputs = await replayChecks(this.g, c);
    if (outputs === false) {
      this.droppedUnverifiable++;
      for (const t of calledTools) this.g.note(t, 'replay_failed');
      return false;
    }
    this.seenChecks.add(checksKey);
    this.dupFilter.add(c.task);
    this.scenarios.push({ id: `schema-${hashString(c.task + checksKey).toString(16).padStart(8, '0')}`, task: c.task, difficulty: c.difficulty, source: 'schema', checks: this.finalChecks(c, outputs) });
    return true;
  }

  /**
   * The values a value's question has for other entities: the same field of the other discovered records, leaving out
   * numbers (too easily said in passing), values that hold the value or that it holds, what the replay's `outputs`
   * show (an agent that did the work may quote them), and excluded entities (another set's).
   */
  private othersOf(value: string, outputs: string): string[] {
    const recs = this.known.recs;
    const keys = new Set(recs.flatMap((r) => Object.entries(r.fields).filter(([, v]) => String(v) === value).map(([k]) => k)));
    // A value in a record's list (an entity's observation): the same list of the other records holds its others, so
    // that a reply that dumps every record (server-memory's read_graph) is no answer.
    const listKeys = new Set(recs.flatMap((r) => Object.entries(r.lists ?? {}).filter(([, xs]) => xs.includes(value)).map(([k]) => k)));
    const out = new Set<string>();
    for (const r of recs) {
      const candidates = [...[...keys].map((k) => r.fields[k]), ...[...listKeys].flatMap((k) => (r.lists?.[k]?.includes(value) ? [] : (r.lists?.[k] ?? [])))];
      for (const o of candidates) {
        if (typeof o !== 'string' || o.trim().length < 2 || numberValue(normalizeAnswerText(o)) !== undefined) continue;
        if (answerContains(o, value) || answerContains(value, o) || answerContains(outputs, o) || this.excludedEntities.has(o.trim().toLowerCase())) continue;
        out.add(o);
      }
    }
    return [...out].slice(0, MAX_OTHERS);
  }

  /** The checks a kept candidate is written with: a value-answer task's as answer_value, with the others of each value. */
  private finalChecks(c: Candidate, outputs: string): Check[] {
    return valueAnswerChecks(c.checks, (t) => this.g.byName.get(t)?.annotations.readOnlyHint === true).map((k) => {
      if (k.kind !== 'answer_value') return k;
      const others = this.othersOf(k.value, outputs);
      return others.length ? { ...k, others } : k;
    });
  }
}

/**
 * A scenario's entities: the values in its checked call arguments and expected answers, lower-cased. Pass
 * them as `exclude.entities` to build a set that shares no entity with this one.
 */
export function scenarioEntities(s: Scenario): string[] {
  return [...scalarArgValues((s.checks ?? []).map((k) => (k.kind === 'tool_called' ? k.args : k.kind === 'answer_value' ? [k.value, ...(k.via ?? []).map((v) => v.args)] : k.value)))];
}
