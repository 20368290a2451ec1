/** What a task asks about: a value chosen from a tool's real output that the agent can only know by calling it. */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import type { Rng } from '../../util/rng.js';
import { entityKey, pathKind } from './arguments.js';
import { LABEL_KEYS, leaves, listingLines, outcomeData, resultText } from './output.js';
import { fieldWords } from './phrasing.js';
import type { Scalar } from './types.js';
import { isPlainObject, isScalar, scalarArgValues } from './values.js';
import { singular, toolNoun, words } from './wording.js';

export const SECRET_KEYS = /key|token|secret|password|passwd|auth|credential|cookie|session/i;

/** Values that differ between two copies of the same data (file times) make no stable ground truth. */
export const UNSTABLE_KEYS = /(^|_|\b)(accessed|modified|created|mtime|atime|ctime|birthtime|timestamp|time|date)s?$/i;

/** Field names that are bare prepositions ("to", "from" of a relation) say nothing as a question. */
export const VAGUE_FIELDS = /^(to|from|of|in|at|by|on|for|type)$/i;

/**
 * What a task asks about: `field` in words as a question asks it ("type", "id of the branch"); `noun`: what the
 * record is, when known. `counts`: the field is the reply's own count of the records it lists (a search's
 * "total_matches"), asked of the search ("How many books match …?"), never of one record. `related`: the record is
 * not the stated thing's own but one linked to it (a relation of an entity), asked as the stated thing's ("the type
 * of the relation of "Ada"").
 */
export type Answer =
  | { kind: 'field'; field: string; values: string[]; noun?: string; inFile?: boolean; counts?: true; related?: true }
  | { kind: 'list'; field: string; noun: string; values: string[] }
  | { kind: 'values'; field: string; values: string[]; noun?: string; inFile?: boolean; related?: true };

/** Chooses what to ask about from a tool's real output; undefined when nothing checkable is there. */
export function chooseAnswer(o: ToolCallOutcome, args: Record<string, unknown>, tool: ToolInfo, rng: Rng): Answer | undefined {
  const data = outcomeData(o);
  const argValues = scalarArgValues(args);
  const usable = (key: string, v: Scalar): boolean => {
    // Secrets must not land in scenario files; ALL_CAPS keys are environment variables, which differ per machine.
    if (typeof v === 'boolean' || SECRET_KEYS.test(key) || UNSTABLE_KEYS.test(key) || VAGUE_FIELDS.test(key) || /^[A-Z][A-Z0-9_]*$/.test(key)) return false;
    const s = String(v).trim();
    // "true"/"false" as text is as unspecific an answer as a boolean. A number is checked as a number, so one digit
    // is an answer too (copies of a book: 2).
    return (s.length >= 2 || typeof v === 'number') && s.length <= 60 && !argValues.has(s.toLowerCase()) && !/\n/.test(s) && !/^(true|false)$/i.test(s);
  };
  // An image or audio result: its MIME type is what it says for sure (the model reads "[image: image/png, 70 bytes]").
  const media = o.media?.[0];
  if (media) return { kind: 'field', field: 'MIME type', noun: media.type, values: [media.mimeType] };
  const options: Answer[] = [];
  if (data !== undefined) {
    const own = toolNoun(tool.name);
    // The entries of a folder's listing or tree are its entries, whatever the tool is called.
    const listNoun = pathKind(tool) === 'folder' ? 'entry' : own;
    const arrays: [string, unknown[]][] = Array.isArray(data) ? [[listNoun, data]] : isPlainObject(data) ? Object.entries(data).filter((e): e is [string, unknown[]] => Array.isArray(e[1])) : [];
    const nounOf = (key: string) => (Array.isArray(data) ? listNoun : /^(results?|items?|data|matches)$/i.test(key) ? own : singular(words(key).pop() ?? key));
    // The records the reply lists, when it lists some: what a count beside them counts.
    const listed = arrays.find(([, arr]) => arr.length > 0 && arr.every(isPlainObject));
    for (const leaf of leaves(data)) {
      const key = leaf.path[leaf.path.length - 1];
      if (!usable(key, leaf.value)) continue;
      if (listed && leaf.path.length === 1 && typeof leaf.value === 'number' && COUNT_KEYS.test(words(key).join(' '))) {
        options.push({ kind: 'field', field: asCount(fieldWords(key), leaf.value), noun: nounOf(listed[0]), counts: true, values: [String(leaf.value)] });
      } else options.push({ kind: 'field', field: asCount(fieldWords(leaf.path.join('_'), own), leaf.value), values: [String(leaf.value)] });
    }
    for (const [key, arr] of arrays) {
      if (arr.length < 1 || arr.length > 4) continue;
      const noun = nounOf(key);
      // A lookup that found exactly one record: its fields, and its short lists, are what to ask about.
      if (arr.length === 1 && isPlainObject(arr[0])) {
        // A record that names none of the stated things (a relation of the entity asked about) is not theirs.
        const related = argValues.size > 0 && !Object.entries(arr[0]).some(([k, v]) => isScalar(v) && entityKey(k) !== undefined && argValues.has(String(v).toLowerCase()));
        const of = related ? ({ related: true } as const) : {};
        for (const [k, v] of Object.entries(arr[0])) {
          if (isScalar(v) && usable(k, v)) options.push({ kind: 'field', field: asCount(fieldWords(k, noun), v), noun, values: [String(v)], ...of });
          if (Array.isArray(v) && v.length >= 1 && v.length <= 4 && v.every((x) => isScalar(x) && usable(k, x))) {
            options.push({ kind: 'values', field: fieldWords(k, noun), noun, values: v.map(String), ...of });
          }
        }
      }
      if (arr.every(isPlainObject)) {
        const lk = LABEL_KEYS.find((k) => arr.every((x) => typeof (x as Record<string, unknown>)[k] === 'string'));
        if (lk) {
          const values = arr.map((x) => String((x as Record<string, unknown>)[lk]));
          if (values.every((v) => usable(lk, v))) options.push({ kind: 'list', field: fieldWords(lk, noun), noun, values });
        }
      } else if (arr.every(isScalar) && arr.every((v) => usable(key, v as Scalar))) {
        options.push({ kind: 'values', field: fieldWords(key), values: arr.map(String) });
      }
    }
    if (!options.length) return undefined;
    const pick = rng.pick(options);
    // A file read whose text is JSON: its fields are what the file holds ("the rent in the file"), not the file's own.
    const readsFile = /\bread\b/.test(words(tool.name).join(' ')) && Object.keys(args).some((k) => entityKey(k) === 'path') && /^[[{]/.test(resultText(o).trim());
    return readsFile && pick.kind !== 'list' ? { ...pick, inFile: true } : pick;
  }
  // Plain text: a number the call produced (not one we passed in), else the whole short reply.
  const text = resultText(o);
  // A file's content: its first or last line is what a person asks about (a number inside a line is no answer).
  const pathArgs = Object.entries(args).filter(([k]) => entityKey(k) === 'path').flatMap(([, v]) => (Array.isArray(v) ? v : [v]));
  if (pathArgs.length && pathKind(tool) !== 'folder' && !listingLines(text)) {
    // Several files in one reply, each headed by its path: their first lines, in order.
    if (pathArgs.length > 1) return firstLines(text, pathArgs.map(String), usable);
    const lines = text.split('\n').map((l) => l.trim()).filter((l) => l && l !== `${String(pathArgs[0])}:` && !/^-{3,}$/.test(l));
    const ends: Answer[] = [];
    if (lines.length >= 2 && usable('line', lines[0]) && text.split(lines[0]).length === 2) ends.push({ kind: 'field', field: 'first line', values: [lines[0]] });
    const last = lines[lines.length - 1];
    if (lines.length >= 2 && usable('line', last) && text.split(last).length === 2) ends.push({ kind: 'field', field: 'last line', values: [last] });
    return ends.length ? rng.pick(ends) : undefined;
  }
  // Lines that are each a path (what a file search returns) are asked for as the paths found, like any listing.
  // Resources (or links to them) the call made or lists: one's MIME type or URI, or the URIs of a few, as the
  // reply's summary lines state them ("[resource link: demo://resource/session/x.gz (x.gz), application/gzip]").
  const resources = [...text.matchAll(/^\[resource(?: link)?: (\S+?)(?: \([^)]*\))?(?:, ([\w.+-]+\/[\w.+-]+))?(?:, [^\]]*)?\]$/gm)];
  if (resources.length === 1) {
    const [, uri, mime] = resources[0];
    const options: Answer[] = [];
    if (mime) options.push({ kind: 'field', field: 'MIME type', noun: 'resource', values: [mime] });
    if (!argValues.has(uri.toLowerCase())) options.push({ kind: 'field', field: 'URI', noun: 'resource', values: [uri] });
    if (options.length) return rng.pick(options);
  }
  const uris = resources.map((m) => m[1]).filter((u) => !argValues.has(u.toLowerCase()));
  // Asked of what the tool is about ("the URIs of the resource links"): "the resource URIs" alone says not whose.
  if (uris.length >= 2 && uris.length <= 4) return { kind: 'values', field: 'URIs', noun: 'resource', values: uris };
  // A switch says what it did first ("Started simulated logging…", "Stopped …"): that word is the answer.
  const switched = /^(started|stopped|enabled|disabled|paused|resumed)\b/i.exec(text);
  if (switched) {
    return { kind: 'field', field: 'state', values: [switched[1]] };
  }
  // A heading line ("Allowed directories:") names what the paths under it are.
  const all = text.split('\n').map((l) => l.trim()).filter(Boolean);
  const heading = all.length >= 2 && /^[A-Za-z][A-Za-z ]{2,40}:$/.test(all[0]) ? all[0].slice(0, -1).toLowerCase() : undefined;
  const lines = heading ? all.slice(1) : all;
  if (lines.length <= 4 && lines.every((l) => l.length <= 200 && /^(\{sandbox\}|\/)\S*$/.test(l) && !argValues.has(l.toLowerCase()))) {
    return { kind: 'values', field: heading ?? 'paths', values: lines };
  }
  // Only an unambiguous number counts: exactly one distinct number in the reply that we did not pass in.
  const nums = [...new Set((text.match(/-?\d+(?:\.\d+)?/g) ?? []).filter((n) => !argValues.has(n)))];
  if (nums.length === 1) return { kind: 'field', field: 'result', values: nums };
  if (text.length >= 2 && text.length <= 80 && !text.includes('\n') && !text.startsWith('[')) return { kind: 'field', field: 'exact response', values: [text] };
  return undefined;
}

/** Keys (in words) of a reply's count of what it found: "total_matches", "count", "num_results", "hits". */
const COUNT_KEYS = /^(?!.*\bpages?\b).*\b(total|count|matches|hits|found|(num|number) (of )?(results|items|records|entries))\b/;

/** Plural nouns whose number is an amount of money, not a count ("groceries": 420). */
const AMOUNT_NOUNS = /^(groceries|savings|earnings|expenses|costs|fees|taxes|wages|funds|proceeds|utilities|bills|payments|sales|revenues|profits|losses|assets|dues|prices|totals)$/;

/**
 * A field whose value is a number, said as the count it is: "copies" → "number of copies", "total matches" → "total
 * number of matches" (a person asks how many, not for "the copies").
 */
function asCount(field: string, v: Scalar): string {
  const ws = field.split(' ');
  const last = ws[ws.length - 1];
  if (typeof v !== 'number' || ws.includes('of') || !/^[a-z]+s$/.test(last) || singular(last) === last || AMOUNT_NOUNS.test(last)) return field;
  return [...ws.slice(0, -1), 'number of', last].join(' ');
}

/** The first line of each file in a reply that gives several, each headed by "PATH:"; undefined unless all are there. */
function firstLines(text: string, paths: readonly string[], usable: (key: string, v: Scalar) => boolean): Answer | undefined {
  const lines = text.split('\n').map((l) => l.trim());
  const values = paths.map((p) => {
    const at = lines.indexOf(`${p}:`);
    // The first line that says something: a JSON file's "{" is no line a person reads.
    return at < 0 ? undefined : lines.slice(at + 1).find((l) => /[A-Za-z]/.test(l) && !/^-{3,}$/.test(l));
  });
  if (values.some((v) => v === undefined || !usable('line', v) || text.split(v).length !== 2)) return undefined;
  return { kind: 'values', field: 'first lines', values: values as string[] };
}
