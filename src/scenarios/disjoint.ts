/**
 * Held-out means held out: validation scenarios must share neither an entity nor a task with the scenarios a
 * model trained on (RL training scenarios, and the warm-up tasks recorded with a bundled model). Otherwise a
 * rise in validation success could be memorisation. Two scenarios overlap when their tasks are near-duplicates
 * (see dedup.ts) or when their first checked calls have the same arguments (the entity the task is about).
 */
import { DEFAULT_DUPLICATE_THRESHOLD, DuplicateFilter } from './dedup.js';
import { canonical } from './offline.js';
import type { Scenario } from './scenario.js';
import { McprlError } from '../util/errors.js';

export class OverlappingScenariosError extends McprlError<'SCENARIO_OVERLAP'> {
  constructor(message: string) {
    super('SCENARIO_OVERLAP', message);
  }
}

/** The arguments of a scenario's first checked call, canonically serialised; undefined without one. */
export function entityKey(s: Pick<Scenario, 'checks'>): string | undefined {
  const first = (s.checks ?? []).find((c) => c.kind === 'tool_called');
  return first && first.kind === 'tool_called' ? `${first.tool}${canonical(first.args)}` : undefined;
}

export interface Overlap {
  heldOut: Scenario;
  other: Pick<Scenario, 'id' | 'task'>;
  otherSet: string;
  reason: 'task' | 'entity';
}

/** Every overlap between the held-out scenarios and each named other set. */
export function findOverlaps(
  heldOut: readonly Scenario[],
  others: Record<string, readonly Pick<Scenario, 'id' | 'task' | 'checks'>[]>,
  threshold = DEFAULT_DUPLICATE_THRESHOLD,
): Overlap[] {
  const out: Overlap[] = [];
  for (const [name, set] of Object.entries(others)) {
    const keys = new Map<string, Pick<Scenario, 'id' | 'task'>>();
    for (const s of set) {
      const k = entityKey(s);
      if (k !== undefined && !keys.has(k)) keys.set(k, s);
    }
    for (const v of heldOut) {
      const k = entityKey(v);
      const sameEntity = k !== undefined ? keys.get(k) : undefined;
      if (sameEntity) {
        out.push({ heldOut: v, other: sameEntity, otherSet: name, reason: 'entity' });
        continue;
      }
      const sameTask = set.find((s) => new DuplicateFilter(threshold, [s.task]).isDuplicate(v.task));
      if (sameTask) out.push({ heldOut: v, other: sameTask, otherSet: name, reason: 'task' });
    }
  }
  return out;
}

/**
 * Throws OverlappingScenariosError saying which sets overlap (and how many scenarios each), the first few
 * overlaps, and `advice(overlaps)`: what to use instead, in the caller's words.
 */
export function assertDisjoint(
  heldOutName: string,
  heldOut: readonly Scenario[],
  others: Record<string, readonly Pick<Scenario, 'id' | 'task' | 'checks'>[]>,
  advice?: (overlaps: Overlap[]) => string,
): void {
  const overlaps = findOverlaps(heldOut, others);
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
  throw new OverlappingScenariosError(
    `${ids} ${heldOutName} scenario(s) overlap other sets (${bySet.join(', ')}), so a gain on them could be memorisation: ` +
      `${shown.join('; ')}${overlaps.length > 3 ? '; …' : ''}${advice ? `. ${advice(overlaps)}` : ''}`,
  );
}
