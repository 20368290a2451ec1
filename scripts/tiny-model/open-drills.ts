/**
 * Open tool drills: agent transcripts against tools made up afresh for every drill — random tool names, argument
 * keys and descriptions, and values from open vocabularies (made-up words, multi-word names, phrases, paths of
 * temporary folders) — so that nothing can be memorised and the only way to the answer is to copy: a quoted value
 * of the task into a call's argument under a key never seen before, a folder and a name joined into a path, a
 * value of one tool's result into the next call, a field or a line of a result into the answer. tool-drills.ts
 * does the same over four fixed domains and the bookshop's words; a model trained on those alone copies only the
 * strings it has seen (docs/tiny-model.md). No tool here can take a name of the published servers the general
 * model is trained on afterwards (HELD_OUT_TOOLS): their names are made of made-up words.
 */
import type { ChatMessage } from '../../src/agent/policy.js';
import { COMPLETE_TASK_TOOL } from '../../src/agent/rollout.js';
import type { OpenAITool } from '../../src/mcp/openai-tools.js';
import { int, pick } from './copy-drills.js';
import { HELD_OUT_TOOLS } from './held-out.js';
import { Transcript } from './tool-drills.js';
import type { makeRng } from '../random-model.js';

/**
 * A drill's random stream, and, when the build gives them, the model's own word tokens: a share of the words drawn
 * are those (withVocabulary). Everyday and made-up words alone leave most of a tokenizer's whole-word tokens
 * (" Lindqvist", " March") out of every copy, and a model never asked to copy them does not (docs/tiny-model.md).
 */
type Rng = ReturnType<typeof makeRng> & { vocabulary?: { words: readonly string[]; share: number } };

/** `rng`, drawing a `share` of its words from `words` (a vocabulary's word tokens, wordTokens) from now on. */
export function withVocabulary(rng: ReturnType<typeof makeRng>, words: readonly string[], share: number): Rng {
  if (words.length === 0 && share > 0) throw new Error('withVocabulary: no words to draw from');
  return Object.assign(rng, { vocabulary: { words, share } });
}

/** The tokens of a vocabulary that are a word or a piece of one (two letters or more, with or without the space before it), as words. */
export function wordTokens(decode: (id: number) => string, size: number): string[] {
  const out = new Set<string>();
  for (let id = 0; id < size; id++) {
    const m = /^ ?([A-Za-z]{2,})$/.exec(decode(id));
    if (m) out.add(m[1]);
  }
  return [...out];
}

/** Everyday words: half the vocabulary of names, phrases and keys; the other half is made-up words. */
const WORDS = (
  'apple river stone garden window letter morning winter summer bridge market harbour forest candle silver paper ' +
  'orange planet signal budget ticket engine pocket island mirror shadow copper violet meadow castle rocket ' +
  'basket camera coffee dinner doctor family friend guitar hammer jacket kitchen ladder meeting number office ' +
  'pencil pepper picture pillow quarter rabbit report school season spring station street table teacher ' +
  'thunder travel valley village wallet weather yellow backend platform customer status project ledger billing ' +
  'notes planning update review launch deadline owner manager engineer team week month first last quick green ' +
  'north south early late small large quiet bright open closed blue red black white new old warm cold'
).split(' ');
const EXTENSIONS = ['txt', 'md', 'json', 'csv', 'log', 'yaml'];
const CONSONANTS = 'bcdfghjklmnprstvwz';
const VOWELS = 'aeiou';

/** A made-up word of 2–3 syllables: a string no warm-up transcript holds. */
function madeUp(rng: Rng): string {
  let w = '';
  for (let i = int(rng, 2, 3); i > 0; i--) w += pick(rng, [...CONSONANTS]) + pick(rng, [...VOWELS]) + (rng.uniform() < 0.3 ? pick(rng, [...CONSONANTS]) : '');
  return w;
}
function word(rng: Rng): string {
  const v = rng.vocabulary;
  if (v && v.share > 0 && rng.uniform() < v.share) return pick(rng, v.words);
  return rng.uniform() < 0.5 ? pick(rng, WORDS) : madeUp(rng);
}
const capital = (w: string) => w[0].toUpperCase() + w.slice(1);
/** A name as people and things have them: one to three capitalised words, sometimes with a number. */
const name = (rng: Rng) => Array.from({ length: int(rng, 1, 3) }, () => capital(word(rng))).join(' ') + (rng.uniform() < 0.15 ? ` ${int(rng, 2, 99)}` : '');
/** A short phrase: a note, an observation, a line of a file. */
const phrase = (rng: Rng) => {
  const words = Array.from({ length: int(rng, 2, 7) }, () => word(rng));
  if (rng.uniform() < 0.25) words.splice(int(rng, 0, words.length), 0, String(int(rng, 1, 2030)));
  return words.join(' ');
};
const alnum = (rng: Rng, n: number) => Array.from({ length: n }, () => pick(rng, [...'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ'])).join('');
/** A folder as servers name them: a temporary folder (as a sandbox is), a home folder or a project folder. */
function folder(rng: Rng): string {
  const base = pick(rng, [
    () => `/tmp/${pick(rng, ['mcprl-sandbox', 'tmp', madeUp(rng), `${word(rng)}-${word(rng)}`])}-${alnum(rng, 6)}`,
    () => `/home/${madeUp(rng)}`,
    () => `/srv/${word(rng)}`,
    () => `/var/${word(rng)}/${madeUp(rng)}`,
  ])();
  const depth = int(rng, 0, 2);
  return [base, ...Array.from({ length: depth }, () => word(rng))].join('/');
}
const fileName = (rng: Rng) => `${[word(rng), ...(rng.uniform() < 0.4 ? [word(rng)] : [])].join(rng.uniform() < 0.5 ? '-' : '_')}.${pick(rng, EXTENSIONS)}`;

/** An argument key of one or two words, snake_case or camelCase, never one of the keys given in `taken`. */
function key(rng: Rng, taken: Set<string>, camel: boolean): string {
  for (;;) {
    const parts = Array.from({ length: int(rng, 1, 2) }, () => word(rng));
    const k = camel ? parts[0] + parts.slice(1).map(capital).join('') : parts.join('_');
    if (!taken.has(k)) {
      taken.add(k);
      return k;
    }
  }
}
/**
 * A key that says what it holds most of the time (`name`, `entityName`, `item_type`, …), as servers' keys do, and a
 * made-up one otherwise; never one of `taken`.
 */
function keyFor(rng: Rng, meaning: readonly string[], taken: Set<string>, camel: boolean): string {
  if (rng.uniform() < 0.3) return key(rng, taken, camel);
  for (;;) {
    const base = pick(rng, meaning);
    const k = rng.uniform() < 0.5 ? base : camel ? `${word(rng)}${capital(base)}` : `${word(rng)}_${base}`;
    if (!taken.has(k)) {
      taken.add(k);
      return k;
    }
  }
}
const NAME = ['name', 'title', 'label'];
const TYPE = ['type', 'kind', 'category'];
const LIST = ['notes', 'observations', 'facts', 'details', 'contents', 'tags'];
/**
 * What a tool does, and the words servers name such a tool with: the compact chat template shows a tool by its
 * name and argument keys alone, so the name is how a task's request finds its tool. Every name is a verb and a
 * noun of its kind, sometimes with a word of the domain between them; none is a held-out server's name.
 */
const KINDS = {
  create: { verbs: ['create', 'add', 'new', 'make', 'register', 'insert'], nouns: ['entities', 'records', 'items', 'entries', 'things', 'people', 'objects'], keys: ['items', 'records', 'entries'] },
  notes: { verbs: ['add', 'append', 'attach', 'save'], nouns: ['observations', 'notes', 'facts', 'remarks', 'comments', 'details'], keys: ['notes', 'observations', 'updates'] },
  link: { verbs: ['create', 'add', 'make', 'link', 'record'], nouns: ['relations', 'links', 'connections', 'relationships', 'edges'], keys: ['links', 'relations', 'edges'] },
  open: { verbs: ['open', 'get', 'fetch', 'load', 'show'], nouns: ['nodes', 'records', 'entities', 'items', 'entries'], keys: ['names'] },
  search: { verbs: ['search', 'find', 'query', 'lookup'], nouns: ['nodes', 'records', 'entities', 'items', 'entries', 'things'], keys: ['query'] },
  delete: { verbs: ['delete', 'remove', 'drop'], nouns: ['entities', 'records', 'items', 'relations', 'notes', 'links'], keys: ['names', 'items'] },
  dump: { verbs: ['read', 'dump', 'export', 'show'], nouns: ['graph', 'everything', 'all', 'registry', 'store'], keys: [] },
  read: { verbs: ['read', 'get', 'load', 'open', 'view', 'cat'], nouns: ['file', 'text_file', 'document', 'doc', 'contents'], keys: ['path'] },
  readMany: { verbs: ['read', 'get', 'load'], nouns: ['multiple_files', 'files', 'many_files', 'documents'], keys: ['paths'] },
  list: { verbs: ['list', 'show', 'ls', 'view'], nouns: ['directory', 'folder', 'dir', 'folder_contents'], keys: ['path'] },
  mkdir: { verbs: ['create', 'make', 'new', 'add'], nouns: ['directory', 'folder', 'dir'], keys: ['path'] },
  info: { verbs: ['get', 'show', 'stat'], nouns: ['file_info', 'info', 'stats', 'metadata'], keys: ['path'] },
  write: { verbs: ['write', 'save', 'put'], nouns: ['file', 'document', 'text'], keys: ['path', 'content'] },
  glob: { verbs: ['search', 'find', 'glob', 'locate', 'match'], nouns: ['files', 'paths', 'file_names', 'documents'], keys: ['path', 'pattern'] },
  tree: { verbs: ['tree', 'walk', 'list', 'show'], nouns: ['tree', 'all_entries', 'folder_tree', 'subtree', 'recursive'], keys: ['path'] },
} as const;
type Kind = keyof typeof KINDS;
const FAMILIES: Kind[][] = [['create', 'notes', 'link', 'open', 'search', 'delete', 'dump'], ['read', 'readMany', 'list', 'mkdir', 'info', 'write', 'glob', 'tree']];
const HELD_OUT = new Set<string>(HELD_OUT_TOOLS);

function toolName(rng: Rng, kind: Kind, taken: Set<string>): string {
  for (;;) {
    const { verbs, nouns } = KINDS[kind];
    const parts = [pick(rng, verbs), ...(rng.uniform() < 0.3 ? [word(rng)] : []), pick(rng, nouns)];
    const n = rng.uniform() < 0.2 ? parts[0] + parts.slice(1).map((p) => p.split('_').map(capital).join('')).join('') : parts.join('_');
    if (!HELD_OUT.has(n) && !taken.has(n)) {
      taken.add(n);
      return n;
    }
  }
}

function tool(name: string, description: string, properties: Record<string, object>, required = Object.keys(properties)): OpenAITool {
  return { type: 'function', function: { name, description, parameters: { type: 'object', properties, required } } };
}
const str = (description: string) => ({ type: 'string', description });

/** Adds, sometimes, an optional argument (shown with `?` in the template's signature), as real tools often have. */
function withOptional(rng: Rng, t: OpenAITool): OpenAITool {
  if (rng.uniform() >= 0.35) return t;
  const params = t.function.parameters as { properties: Record<string, object>; required: string[] };
  const extra = key(rng, new Set(Object.keys(params.properties)), rng.uniform() < 0.5);
  return { ...t, function: { ...t.function, parameters: { ...params, properties: { ...params.properties, [extra]: rng.uniform() < 0.5 ? str(extra) : { type: 'number' } } } } };
}

/**
 * The drill's own tools (`kinds`, made by `make` in that order) among 1 to 12 others, mostly of the same family of
 * server (records or files), which the drill never calls: picking the tool out of a list as long as a published
 * server's (server-filesystem lists 14) is part of the skill.
 */
function server(rng: Rng, kinds: Kind[], make: (names: string[]) => OpenAITool[]): OpenAITool[] {
  const taken = new Set<string>();
  const own = make(kinds.map((k) => toolName(rng, k, taken)));
  const family = FAMILIES.find((f) => kinds.every((k) => f.includes(k)))!;
  const near = family.filter((k) => !kinds.includes(k));
  const far = (Object.keys(KINDS) as Kind[]).filter((k) => !family.includes(k));
  const others = Array.from({ length: int(rng, 1, 12) }, () => pick(rng, rng.uniform() < 0.8 ? near : far)).map((k) => {
    const keys = KINDS[k].keys.length && rng.uniform() < 0.7 ? [...KINDS[k].keys] : KINDS[k].keys.length ? [key(rng, new Set(), rng.uniform() < 0.5)] : [];
    return tool(toolName(rng, k, taken), `${capital(KINDS[k].verbs[0])} ${KINDS[k].nouns[0].replace(/_/g, ' ')}.`, Object.fromEntries(keys.map((x) => [x, str(x)])));
  });
  return [...[...own, ...others].map((t) => withOptional(rng, t)).sort(() => rng.uniform() - 0.5), COMPLETE_TASK_TOOL];
}

const quoted = (xs: string[]) => (xs.length === 1 ? `"${xs[0]}"` : `${xs.slice(0, -1).map((x) => `"${x}"`).join(', ')} and "${xs[xs.length - 1]}"`);
const ask = (rng: Rng, request: string) => pick(rng, [`${capital(request)}.`, `Please ${request}.`, `Can you ${request}?`, `I need you to ${request}.`, `Could you ${request}?`, `Go ahead and ${request}.`]);
const askValue = (rng: Rng, what: string, of: string) => pick(rng, [`What is the ${what} of ${of}?`, `Can you check ${of} and tell me the ${what}?`, `Find the ${what} of ${of}, please.`, `Do you know the ${what} of ${of}?`, `Please give me the ${what} of ${of}.`]);

type Drill = { messages: ChatMessage[]; tools: OpenAITool[] };

const arrayOf = (properties: Record<string, object>, description: string) => ({ type: 'array', description, items: { type: 'object', properties, required: Object.keys(properties) } });
const strings = (description: string) => ({ type: 'array', items: { type: 'string' }, description });

/** Things written as an array of objects whose fields the task quotes: new things with notes, or notes on things. */
function writeRecords(rng: Rng): Drill {
  const camel = rng.uniform() < 0.5;
  const taken = new Set<string>();
  const mode = pick(rng, ['create', 'notes'] as const);
  const thing = word(rng);
  const [arrayKey, nameKey, listKey] = [keyFor(rng, KINDS[mode].keys, taken, camel), keyFor(rng, NAME, taken, camel), keyFor(rng, LIST, taken, camel)];
  const typeKey = mode === 'create' && rng.uniform() < 0.7 ? keyFor(rng, TYPE, taken, camel) : undefined;
  const noteWord = pick(rng, ['notes', 'observations', 'facts', 'details']);
  const items = Array.from({ length: int(rng, 1, 3) }, () => ({ [nameKey]: name(rng), ...(typeKey ? { [typeKey]: thing } : {}), [listKey]: Array.from({ length: int(rng, 1, 3) }, () => phrase(rng)) }));
  let own: string[] = [];
  const tools = server(rng, [mode], (names) => ((own = names), [tool(names[0], `${mode === 'create' ? 'Create' : 'Add notes to'} ${thing} records.`, {
    [arrayKey]: arrayOf({ [nameKey]: str(`The name of the ${thing}.`), ...(typeKey ? { [typeKey]: str('Its kind.') } : {}), [listKey]: strings(`The ${noteWord}.`) }, `The ${thing}s.`),
  })]));
  const request = items.map((it) => (mode === 'create'
    ? pick(rng, [`add the ${thing} "${it[nameKey]}" with the ${noteWord} ${quoted(it[listKey] as string[])}`, `create a ${thing} named "${it[nameKey]}" noted as ${quoted(it[listKey] as string[])}`])
    : pick(rng, [`add ${quoted(it[listKey] as string[])} to what is recorded about "${it[nameKey]}"`, `note ${quoted(it[listKey] as string[])} for "${it[nameKey]}"`]))).join(' and ');
  return { tools, messages: new Transcript(ask(rng, request)).call(own[0], { [arrayKey]: items }, items).answer('Done.').messages };
}

/** A link between two quoted things, of a kind the task says in plain words. */
function writeLink(rng: Rng): Drill {
  const camel = rng.uniform() < 0.5;
  const taken = new Set<string>();
  const [arrayKey, fromKey, toKey, typeKey] = [keyFor(rng, KINDS.link.keys, taken, camel), keyFor(rng, ['from', 'source', 'start'], taken, camel), keyFor(rng, ['to', 'target', 'end'], taken, camel), keyFor(rng, ['relationType', 'linkType', 'kind', 'type'], taken, camel)];
  const links = Array.from({ length: int(rng, 1, 2) }, () => ({ [fromKey]: name(rng), [toKey]: name(rng), [typeKey]: `${pick(rng, ['works on', 'owns', 'manages', 'visits', 'likes', 'reads', 'follows', 'builds', 'uses', 'works at', 'knows'])}${rng.uniform() < 0.3 ? ` ${word(rng)}` : ''}` }));
  let own: string[] = [];
  const tools = server(rng, ['link'], (names) => ((own = names), [tool(names[0], 'Link things to each other.', { [arrayKey]: arrayOf({ [fromKey]: str('Where the link starts.'), [toKey]: str('Where the link ends.'), [typeKey]: str('What kind of link it is.') }, 'The links.') })]));
  const request = links.map((l) => `record that "${l[fromKey]}" ${l[typeKey]} "${l[toKey]}"`).join(' and ');
  return { tools, messages: new Transcript(ask(rng, request)).call(own[0], { [arrayKey]: links }, links).answer('Done.').messages };
}

/** A folder made from a quoted name inside a quoted folder: the path is the two joined. */
function makeInFolder(rng: Rng): Drill {
  const pathKey = rng.uniform() < 0.7 ? 'path' : key(rng, new Set(), rng.uniform() < 0.5);
  const dir = folder(rng);
  const leaf = rng.uniform() < 0.5 ? `${word(rng)}-${word(rng)}` : word(rng);
  const thing = pick(rng, ['folder', 'directory']);
  let own: string[] = [];
  const tools = server(rng, ['mkdir'], (names) => ((own = names), [tool(names[0], `Create a new ${thing}.`, { [pathKey]: str(`Where to create the ${thing}.`) })]));
  const request = pick(rng, [`create a ${thing} named "${leaf}" in the folder "${dir}"`, `make a new ${thing} "${leaf}" inside "${dir}"`]);
  return { tools, messages: new Transcript(ask(rng, request)).call(own[0], { [pathKey]: `${dir}/${leaf}` }, `Successfully created ${dir}/${leaf}`).answer('Done.').messages };
}

/** A file read by its quoted path, then its first or last line reported. */
function readLine(rng: Rng): Drill {
  const pathKey = rng.uniform() < 0.7 ? 'path' : key(rng, new Set(), rng.uniform() < 0.5);
  const path = `${folder(rng)}/${fileName(rng)}`;
  const lines = Array.from({ length: int(rng, 1, 5) }, () => (rng.uniform() < 0.3 ? `# ${capital(phrase(rng))}` : capital(phrase(rng))));
  const which = pick(rng, ['first', 'last'] as const);
  let own: string[] = [];
  const tools = server(rng, ['read'], (names) => ((own = names), [tool(names[0], 'Read the contents of a file.', { [pathKey]: str('The file to read.') })]));
  const task = askValue(rng, `${which} line`, `the file "${path}"`);
  return { tools, messages: new Transcript(task).call(own[0], { [pathKey]: path }, lines.join('\n')).answer(which === 'first' ? lines[0] : lines[lines.length - 1]).messages };
}

/** Several files read by one call that takes their paths; each first line reported. */
function readMany(rng: Rng): Drill {
  const pathsKey = rng.uniform() < 0.7 ? 'paths' : key(rng, new Set(), rng.uniform() < 0.5);
  const dir = folder(rng);
  const files = Array.from({ length: int(rng, 2, 3) }, () => ({ path: `${dir}/${fileName(rng)}`, lines: Array.from({ length: int(rng, 1, 3) }, () => capital(phrase(rng))) }));
  let own: string[] = [];
  const tools = server(rng, ['readMany'], (names) => ((own = names), [tool(names[0], 'Read several files at once.', { [pathsKey]: strings('The files to read.') })]));
  const task = pick(rng, [`Tell me the first lines of the files ${quoted(files.map((f) => f.path))}.`, `Can you give me the first lines of the files ${quoted(files.map((f) => f.path))}?`]);
  const result = files.map((f) => `${f.path}:\n${f.lines.join('\n')}\n`).join('\n---\n');
  return { tools, messages: new Transcript(task).call(own[0], { [pathsKey]: files.map((f) => f.path) }, result).answer(files.map((f) => f.lines[0]).join(', ')).messages };
}

/** Entries of a quoted folder listed, their names reported. */
function listFolder(rng: Rng): Drill {
  const pathKey = rng.uniform() < 0.7 ? 'path' : key(rng, new Set(), rng.uniform() < 0.5);
  const dir = folder(rng);
  const entries = Array.from({ length: int(rng, 1, 4) }, () => (rng.uniform() < 0.7 ? { kind: 'FILE', name: fileName(rng) } : { kind: 'DIR', name: word(rng) }));
  let own: string[] = [];
  const tools = server(rng, ['list'], (names) => ((own = names), [tool(names[0], 'List what a folder holds.', { [pathKey]: str('The folder.') })]));
  const task = pick(rng, [`What are the names of the entries of the folder "${dir}"?`, `Please give me the name of every entry in the folder "${dir}".`]);
  return { tools, messages: new Transcript(task).call(own[0], { [pathKey]: dir }, entries.map((e) => `[${e.kind}] ${e.name}`).join('\n')).answer(entries.map((e) => e.name).join(', ')).messages };
}

/** A thing looked up by its quoted name (open by names) or a word of it (search); a field of the record reported. */
function lookUp(rng: Rng): Drill {
  const camel = rng.uniform() < 0.5;
  const taken = new Set<string>();
  const [nameKey, typeKey, listKey] = [keyFor(rng, NAME, taken, camel), keyFor(rng, TYPE, taken, camel), keyFor(rng, LIST, taken, camel)];
  const record = { [nameKey]: name(rng), [typeKey]: word(rng), [listKey]: Array.from({ length: int(rng, 1, 3) }, () => phrase(rng)) };
  const byNames = rng.uniform() < 0.5;
  const argKey = rng.uniform() < 0.7 ? KINDS[byNames ? 'open' : 'search'].keys[0] : key(rng, taken, camel);
  const nameWords = (record[nameKey] as string).split(' ');
  const lastWord = nameWords.filter((w) => !/^\d+$/.test(w)).pop()!;
  const asked = byNames ? record[nameKey] as string : pick(rng, [record[nameKey] as string, lastWord]);
  let own: string[] = [];
  const tools = server(rng, [byNames ? 'open' : 'search'], (names) => ((own = names), [tool(names[0], byNames ? 'Open records by their names.' : 'Search records by any text they hold.', { [argKey]: byNames ? strings('The names.') : str('Words to look for.') })]));
  const others = byNames ? [] : Array.from({ length: int(rng, 0, 2) }, () => ({ [nameKey]: `${name(rng)} ${asked}`, [typeKey]: word(rng), [listKey]: [phrase(rng)] }));
  const field = pick(rng, [[nameKey, 'name'], [typeKey, 'type'], [listKey, 'notes']] as const);
  const reported = field[0] === listKey ? (record[listKey] as string[]).join(', ') : String(record[field[0]]);
  const of = asked === record[nameKey] ? `"${asked}"` : `the ${pick(rng, ['thing', 'record', 'entry', 'entity'])} matching "${asked}"`;
  const result = { [pick(rng, ['results', 'items', 'records', 'entities'])]: field[0] === nameKey ? [record] : [record, ...others].sort(() => rng.uniform() - 0.5) };
  const what = field[1] === 'notes' ? pick(rng, ['notes', 'observations']) : field[1];
  return { tools, messages: new Transcript(askValue(rng, what, of)).call(own[0], { [argKey]: byNames ? [asked] : asked }, result).answer(reported).messages };
}

/** Notes added to the thing a quoted note identifies: search for it first, then copy its name into the write. */
function findThenWrite(rng: Rng): Drill {
  const camel = rng.uniform() < 0.5;
  const taken = new Set<string>();
  const [arrayKey, nameKey, listKey] = [keyFor(rng, KINDS.notes.keys, taken, camel), keyFor(rng, NAME, taken, camel), keyFor(rng, LIST, taken, camel)];
  const queryKey = rng.uniform() < 0.7 ? 'query' : key(rng, taken, camel);
  const thing = word(rng);
  const target = { [nameKey]: name(rng), [listKey]: Array.from({ length: int(rng, 1, 3) }, () => phrase(rng)) };
  const clue = pick(rng, target[listKey] as string[]);
  const added = Array.from({ length: int(rng, 1, 2) }, () => phrase(rng));
  let own: string[] = [];
  const tools = server(rng, ['search', 'notes'], (names) => ((own = names), [
    tool(names[0], 'Search records by any text they hold.', { [queryKey]: str('Text to look for.') }),
    tool(names[1], 'Add notes to records.', { [arrayKey]: arrayOf({ [nameKey]: str('The record.'), [listKey]: strings('The notes.') }, 'The notes to add.') }),
  ]));
  const task = ask(rng, `add ${quoted(added)} to what is recorded about the ${thing} noted as "${clue}"`);
  const items = [{ [nameKey]: target[nameKey], [listKey]: added }];
  return { tools, messages: new Transcript(task).call(own[0], { [queryKey]: clue }, { results: [target] }).call(own[1], { [arrayKey]: items }, items).answer('Done.').messages };
}

/** Files whose names match a pattern the task gives, under a quoted folder; their paths reported. */
function findFiles(rng: Rng): Drill {
  const camel = rng.uniform() < 0.5;
  const [pathKey, patternKey] = rng.uniform() < 0.7 ? ['path', 'pattern'] : [key(rng, new Set(), camel), key(rng, new Set(['path']), camel)];
  const dir = folder(rng);
  const ext = pick(rng, EXTENSIONS);
  const found = Array.from({ length: int(rng, 1, 3) }, () => `${dir}/${rng.uniform() < 0.3 ? `${word(rng)}/` : ''}${word(rng)}.${ext}`);
  const pattern = found.length === 1 && rng.uniform() < 0.3 ? found[0].slice(found[0].lastIndexOf('/') + 1) : pick(rng, [`*.${ext}`, `**/*.${ext}`]);
  let own: string[] = [];
  const tools = server(rng, ['glob'], (names) => ((own = names), [tool(names[0], 'Find the files whose names match a pattern.', { [pathKey]: str('The folder to search.'), [patternKey]: str('The pattern to match.') })]));
  const task = pick(rng, [`Find the paths of the files named ${pattern} in the folder "${dir}", please.`, `Please list the paths of the files named ${pattern} in the folder "${dir}".`, `Tell me all the paths of the files named ${pattern} in the folder "${dir}".`]);
  return { tools, messages: new Transcript(task).call(own[0], { [pathKey]: dir, [patternKey]: pattern }, found.join('\n')).answer(found.join(', ')).messages };
}

/** A file's metadata looked up by its quoted path; one field of it reported. */
function fileInfo(rng: Rng): Drill {
  const pathKey = rng.uniform() < 0.7 ? 'path' : key(rng, new Set(), rng.uniform() < 0.5);
  const path = `${folder(rng)}/${fileName(rng)}`;
  const date = () => `2026-${String(int(rng, 1, 12)).padStart(2, '0')}-${String(int(rng, 1, 28)).padStart(2, '0')}T${String(int(rng, 0, 23)).padStart(2, '0')}:${String(int(rng, 0, 59)).padStart(2, '0')}:00.000Z`;
  const info = { size: String(int(rng, 10, 99999)), created: date(), modified: date(), isDirectory: 'false', isFile: 'true', permissions: pick(rng, ['644', '600', '664', '755', '444']) };
  const field = pick(rng, ['size', 'permissions', 'modified', 'created'] as const);
  let own: string[] = [];
  const tools = server(rng, ['info'], (names) => ((own = names), [tool(names[0], 'Show the size, dates and permissions of a file.', { [pathKey]: str('The file.') })]));
  const task = pick(rng, [askValue(rng, field, `the file "${path}"`), `Can you check the file "${path}" and tell me the ${field}?`, `Look up the file "${path}" and give me the ${field}.`]);
  const result = Object.entries(info).map(([k, v]) => `${k}: ${v}`).join('\n');
  return { tools, messages: new Transcript(task).call(own[0], { [pathKey]: path }, result).answer(info[field]).messages };
}

/** Every entry anywhere under a quoted folder, from one call that walks it and answers nested JSON. */
function walkFolder(rng: Rng): Drill {
  const pathKey = rng.uniform() < 0.7 ? 'path' : key(rng, new Set(), rng.uniform() < 0.5);
  const dir = folder(rng);
  const names: string[] = [];
  const entries = (depth: number): object[] => Array.from({ length: int(rng, 1, 3) }, () => {
    const isDir = depth < 2 && rng.uniform() < 0.3;
    const n = isDir ? word(rng) : fileName(rng);
    names.push(n);
    return isDir ? { name: n, type: 'directory', children: entries(depth + 1) } : { name: n, type: 'file' };
  });
  const tree = entries(0);
  let own: string[] = [];
  const tools = server(rng, ['tree'], (ns) => ((own = ns), [tool(ns[0], 'Show everything under a folder, as nested JSON.', { [pathKey]: str('The folder.') })]));
  const task = pick(rng, [`Tell me the name of every one of the entries anywhere under the folder "${dir}".`, `List the names of the entries anywhere under the folder "${dir}".`]);
  return { tools, messages: new Transcript(task).call(own[0], { [pathKey]: dir }, JSON.stringify(tree, null, 2)).answer(names.join(', ')).messages };
}

const SHAPES = [writeRecords, writeLink, makeInFolder, readLine, readMany, listFolder, lookUp, findThenWrite, findFiles, fileInfo, walkFolder];

/** One open tool drill of a shape drawn at random. */
export function openDrill(rng: Rng): Drill {
  return pick(rng, SHAPES)(rng);
}

/** One open copy drill (no tools): repeat quoted open-vocabulary values, or read one field out of a JSON object. */
export function openCopyDrill(rng: Rng): ChatMessage[] {
  const value = () => pick(rng, [name, phrase, word, folder, (r: Rng) => `${folder(r)}/${fileName(r)}`, (r: Rng) => alnum(r, int(r, 3, 10))])(rng);
  if (rng.uniform() < 0.5) {
    const items = Array.from({ length: int(rng, 1, 4) }, value);
    return [
      { role: 'user', content: `${pick(rng, ['Repeat exactly', 'Copy these values', 'Say back', 'Echo'])}: ${items.map((v) => `"${v}"`).join(', ')}` },
      { role: 'assistant', content: items.join(', ') },
    ];
  }
  const taken = new Set<string>();
  const camel = rng.uniform() < 0.5;
  const obj = Object.fromEntries(Array.from({ length: int(rng, 2, 5) }, () => [key(rng, taken, camel), value()]));
  const k = pick(rng, Object.keys(obj));
  return [
    { role: 'user', content: `${JSON.stringify(obj, null, 2)}\nWhat is the ${k.replace(/_/g, ' ').replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase()}?` },
    { role: 'assistant', content: obj[k] },
  ];
}
