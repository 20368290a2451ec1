/**
 * Large scenario sets shaped like generated ones, for the benchmark and the tests of the held-out check at scale:
 * lookups by id, lookups by a name without digits (tasks without concrete values, the hard case for near-duplicate
 * search) and two-call chains. Deterministic by seed. Ids are unique; a name now and then comes twice (two scenarios
 * about one author), which the splitter keeps on one side.
 */
import type { Scenario } from '../src/scenarios/scenario.js';
import { createRng } from '../src/util/rng.js';

const SYLLABLES = ['ka', 'lo', 'mi', 'ren', 'sa', 'tu', 'vel', 'dor', 'en', 'ris', 'ba', 'quin', 'zo', 'har', 'ly', 'mon'];
const FIELDS = ['year', 'title', 'price', 'genre', 'author', 'stock', 'country', 'name'];

/** `n` distinct scenarios, deterministic: every third about a named entity (a task without concrete values). */
export function largeScenarioSet(n: number, seed = 1): Scenario[] {
  const rng = createRng(seed);
  const pick = <T>(xs: readonly T[]) => xs[rng.int(0, xs.length - 1)];
  return Array.from({ length: n }, (_, i): Scenario => {
    const field = pick(FIELDS);
    if (i % 3 === 1) {
      const name = `${pick(SYLLABLES)}${pick(SYLLABLES)}${pick(SYLLABLES)} ${pick(SYLLABLES)}${pick(SYLLABLES)}${pick(SYLLABLES)}`;
      return { id: `s${i}`, task: `Look up the author "${name}" and give me its ${field}.`, difficulty: 1, source: 'schema', checks: [{ kind: 'tool_called', tool: 'get_author', args: { name } }] };
    }
    const id = `bk-${String(i).padStart(6, '0')}`;
    if (i % 3 === 2) {
      return { id: `s${i}`, task: `First get the ${field} of the book ${id}. Then find its author and tell me the ${pick(FIELDS)}.`, difficulty: 3, source: 'schema', checks: [{ kind: 'tool_called', tool: 'get_book', args: { book_id: id, detail: field } }] };
    }
    return { id: `s${i}`, task: `What is the ${field} of the book ${id}?`, difficulty: 1, source: 'schema', checks: [{ kind: 'tool_called', tool: 'get_book', args: { book_id: id } }] };
  });
}
