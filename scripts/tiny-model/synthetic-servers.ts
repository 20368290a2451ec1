/**
 * Synthetic MCP servers for the general tiny model's warm-up (`npm run tiny-model -- --recipe general`): many small
 * servers of varied shapes and domains, each a real SDK McpServer, so that the offline generator and the scripted
 * expert run on them exactly as on any published server. A server is drawn from its index alone (`syntheticSpec`):
 *
 * - a *records* server keeps entities of one domain (plants, ships, courses…), keyed by name or by id, with a
 *   category, a list of notes, a few numbers and a nested object; its tools search by query (a listing), look one
 *   up, open several by name, list by category, dump everything, and write: create entities from an array of
 *   objects, add notes to entities, link entities (arrays of objects again);
 * - a *folder* server keeps text documents under path-like names; its tools read a document, list a folder,
 *   describe a document (nested JSON), find documents by a pattern, and write: make a folder, write a document.
 *
 * Tool names, argument keys (snake_case or camelCase), descriptions and result layouts vary from server to server,
 * and none is a name of server-memory or server-filesystem: those are the published servers the general model is
 * trained on by GRPO afterwards, and must never appear in its warm-up. State lives in memory, one copy per MCP
 * session (`serveSynthetic` gives every HTTP session a fresh one), so that a write task's rollout starts from the
 * same data as the generator saw.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { makeRng } from '../random-model.js';
import { handleMcpRequest, jsonRpcError } from '../../fixtures/server/http.js';
import { createHttpGuard } from '../../src/util/http-guard.js';

type Rng = ReturnType<typeof makeRng>;

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)];
const int = (rng: Rng, lo: number, hi: number) => lo + Math.floor(rng.uniform() * (hi - lo + 1));
const shuffle = <T>(rng: Rng, xs: readonly T[]): T[] => {
  const out = [...xs];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rng.uniform() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
};

/** A domain of a records server: its entity, the words its names are made of, its categories and notes. */
interface Domain {
  kind: string;
  plural: string;
  /** Words the first and second half of a name are drawn from. */
  first: readonly string[];
  second: readonly string[];
  categories: readonly string[];
  notes: readonly string[];
  /** Number fields and their ranges. */
  numbers: Record<string, [number, number]>;
  /** The nested object's key and its two fields' values. */
  place: [string, readonly string[], readonly string[]];
}

const CITIES = ['Oslo', 'Quito', 'Nairobi', 'Hanoi', 'Lyon', 'Perth', 'Tbilisi', 'Cusco', 'Porto', 'Riga', 'Accra', 'Kyoto'];
const REGIONS = ['north', 'south', 'east', 'west', 'centre', 'coast'];

const DOMAINS: Domain[] = [
  { kind: 'plant', plural: 'plants', first: ['Silver', 'Wild', 'Dwarf', 'Golden', 'Night', 'Marsh'], second: ['Fern', 'Sage', 'Orchid', 'Maple', 'Thistle', 'Lily'], categories: ['herb', 'shrub', 'tree', 'vine'], notes: ['needs full sun', 'water twice a week', 'flowers in spring', 'repotted last autumn', 'attracts bees'], numbers: { height_cm: [5, 900], age_years: [1, 60] }, place: ['bed', ['greenhouse', 'courtyard', 'orchard'], REGIONS] },
  { kind: 'ship', plural: 'ships', first: ['Northern', 'Swift', 'Iron', 'Blue', 'Old', 'Bright'], second: ['Star', 'Gull', 'Anchor', 'Tide', 'Harbor', 'Wave'], categories: ['ferry', 'tanker', 'trawler', 'yacht'], notes: ['refitted in 2019', 'crew of twelve', 'sails on Mondays', 'flag of Norway', 'hull painted red'], numbers: { length_m: [12, 300], crew: [2, 80] }, place: ['port', CITIES, REGIONS] },
  { kind: 'course', plural: 'courses', first: ['Applied', 'Modern', 'Intro', 'Advanced', 'Practical', 'Open'], second: ['Statistics', 'Pottery', 'Spanish', 'Welding', 'Chemistry', 'Poetry'], categories: ['evening', 'online', 'weekend', 'intensive'], notes: ['taught by Dr Adeyemi', 'starts in September', 'lab fee included', 'exam at the end', 'waiting list open'], numbers: { seats: [8, 120], credits: [1, 10] }, place: ['campus', CITIES, ['hall A', 'hall B', 'annex']] },
  { kind: 'ticket', plural: 'tickets', first: ['Login', 'Billing', 'Printer', 'Network', 'Upload', 'Export'], second: ['Error', 'Outage', 'Delay', 'Crash', 'Request', 'Bug'], categories: ['open', 'pending', 'resolved', 'escalated'], notes: ['reported by the finance team', 'seen after the update', 'customer called twice', 'workaround sent', 'needs a reboot'], numbers: { priority: [1, 5], replies: [0, 40] }, place: ['team', ['support', 'platform', 'desktop'], REGIONS] },
  { kind: 'pet', plural: 'pets', first: ['Biscuit', 'Pepper', 'Luna', 'Rocky', 'Mochi', 'Ziggy'], second: ['Brown', 'Small', 'Junior', 'Grey', 'Spotted', 'Loud'], categories: ['cat', 'dog', 'rabbit', 'parrot'], notes: ['vaccinated in May', 'allergic to chicken', 'likes long walks', 'adopted from a shelter', 'sleeps all day'], numbers: { weight_kg: [1, 45], age: [1, 18] }, place: ['home', CITIES, ['flat', 'house', 'farm']] },
  { kind: 'train', plural: 'trains', first: ['Coastal', 'Night', 'Alpine', 'Express', 'Valley', 'Metro'], second: ['Runner', 'Arrow', 'Link', 'Comet', 'Line', 'Sprinter'], categories: ['regional', 'intercity', 'sleeper', 'freight'], notes: ['stops at every station', 'has a dining car', 'runs on weekdays', 'bikes allowed', 'delayed in winter'], numbers: { carriages: [2, 16], top_speed_kmh: [80, 320] }, place: ['depot', CITIES, REGIONS] },
  { kind: 'recipe', plural: 'recipes', first: ['Spicy', 'Creamy', 'Smoked', 'Lemon', 'Garlic', 'Sweet'], second: ['Risotto', 'Curry', 'Tart', 'Stew', 'Salad', 'Noodles'], categories: ['starter', 'main', 'dessert', 'snack'], notes: ['serves four', 'ready in thirty minutes', 'freezes well', 'uses fresh basil', 'family favourite'], numbers: { minutes: [5, 240], calories: [90, 1400] }, place: ['origin', CITIES, REGIONS] },
  { kind: 'museum', plural: 'museums', first: ['Royal', 'Maritime', 'Modern', 'Natural', 'City', 'Folk'], second: ['Gallery', 'Archive', 'Collection', 'Hall', 'House', 'Museum'], categories: ['art', 'history', 'science', 'craft'], notes: ['free on Sundays', 'closed on Mondays', 'new wing opened', 'guided tours at noon', 'cafe on the roof'], numbers: { rooms: [3, 90], visitors_per_day: [40, 9000] }, place: ['location', CITIES, REGIONS] },
  { kind: 'game', plural: 'games', first: ['Hidden', 'Lost', 'Tiny', 'Endless', 'Crystal', 'Mystic'], second: ['Kingdom', 'Quest', 'Tower', 'Garden', 'Dungeon', 'Island'], categories: ['puzzle', 'strategy', 'racing', 'adventure'], notes: ['two players', 'supports co-op', 'won an award', 'sequel announced', 'has a level editor'], numbers: { players: [1, 8], rating: [1, 10] }, place: ['studio', CITIES, ['indie', 'major', 'solo']] },
  { kind: 'sensor', plural: 'sensors', first: ['Roof', 'Cellar', 'Lobby', 'Garage', 'Attic', 'Boiler'], second: ['Thermo', 'Hygro', 'Motion', 'Smoke', 'Light', 'Door'], categories: ['online', 'offline', 'battery low', 'calibrating'], notes: ['installed in March', 'reports every minute', 'battery replaced', 'firmware 2.1', 'false alarm last week'], numbers: { reading: [0, 100], battery_pct: [1, 100] }, place: ['site', ['warehouse', 'office', 'school'], REGIONS] },
  { kind: 'band', plural: 'bands', first: ['Velvet', 'Electric', 'Paper', 'Neon', 'Quiet', 'Rusty'], second: ['Owls', 'Engines', 'Lanterns', 'Wolves', 'Signals', 'Foxes'], categories: ['rock', 'jazz', 'folk', 'techno'], notes: ['touring in summer', 'new album in June', 'four members', 'formed in a garage', 'plays covers'], numbers: { albums: [1, 20], founded: [1960, 2024] }, place: ['hometown', CITIES, REGIONS] },
  { kind: 'supplier', plural: 'suppliers', first: ['Acme', 'Nordic', 'Prime', 'Delta', 'Union', 'Vertex'], second: ['Metals', 'Textiles', 'Foods', 'Plastics', 'Paper', 'Tools'], categories: ['preferred', 'approved', 'on hold', 'new'], notes: ['invoices monthly', 'ships within a week', 'contract renewed', 'audit passed', 'minimum order 50 units'], numbers: { lead_days: [1, 60], rating: [1, 5] }, place: ['office', CITIES, REGIONS] },
];

/** What a folder server holds: a root, topics, and the words of its documents. */
const FOLDER_DOMAINS = [
  { root: 'garden', docs: 'notes', sub: ['beds', 'seeds'], words: ['tomatoes', 'compost', 'watering', 'frost', 'seedlings', 'mulch'] },
  { root: 'studio', docs: 'drafts', sub: ['songs', 'mixes'], words: ['chorus', 'tempo', 'bassline', 'lyrics', 'reverb', 'bridge'] },
  { root: 'office', docs: 'reports', sub: ['finance', 'hiring'], words: ['budget', 'invoice', 'forecast', 'interview', 'payroll', 'audit'] },
  { root: 'travel', docs: 'plans', sub: ['tickets', 'maps'], words: ['flight', 'hostel', 'museum', 'ferry', 'visa', 'luggage'] },
  { root: 'kitchen', docs: 'recipes', sub: ['baking', 'soups'], words: ['flour', 'yeast', 'broth', 'onions', 'oven', 'butter'] },
  { root: 'school', docs: 'lessons', sub: ['maths', 'history'], words: ['fractions', 'homework', 'empire', 'quiz', 'timeline', 'essay'] },
];

const VIEW_VERBS = ['get', 'fetch', 'show', 'lookup'];
const FIND_VERBS = ['search', 'find', 'query'];
const MAKE_VERBS = ['create', 'add', 'register'];

export type KeyStyle = 'snake' | 'camel';

/** Everything a synthetic server is drawn from; one index gives one server (see module comment). */
export interface SyntheticSpec {
  index: number;
  shape: 'records' | 'folder';
  name: string;
  /** records: the domain's index in DOMAINS; folder: in FOLDER_DOMAINS. */
  domain: number;
  keyedBy: 'name' | 'id';
  keyStyle: KeyStyle;
  seed: number;
}

/** How many different synthetic servers there are before domains and styles repeat with other data. */
export const SYNTHETIC_KINDS = DOMAINS.length + FOLDER_DOMAINS.length;

/** The spec of synthetic server `index` (0, 1, 2, …): every third one a folder server, the others records servers. */
export function syntheticSpec(index: number): SyntheticSpec {
  const rng = makeRng(7919 * (index + 1));
  const shape = index % 3 === 2 ? 'folder' : 'records';
  const domain = shape === 'folder' ? Math.floor(index / 3) % FOLDER_DOMAINS.length : (index - Math.floor(index / 3)) % DOMAINS.length;
  const name = shape === 'folder' ? `${FOLDER_DOMAINS[domain].root}-files` : `${DOMAINS[domain].plural}-registry`;
  return { index, shape, name: `synthetic-${name}-${index}`, domain, keyedBy: rng.uniform() < 0.5 ? 'name' : 'id', keyStyle: rng.uniform() < 0.5 ? 'snake' : 'camel', seed: int(rng, 1, 1_000_000) };
}

/** `entity_type` or `entityType`, as the server's style wants. */
function keyOf(style: KeyStyle, ...words: string[]): string {
  if (style === 'snake') return words.join('_');
  return words.map((w, i) => (i === 0 ? w : w[0].toUpperCase() + w.slice(1))).join('');
}

function json(value: unknown): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }] };
}
function text(value: string): CallToolResult {
  return { content: [{ type: 'text', text: value }] };
}
function fail(message: string): CallToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}

const READ_ONLY = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false };
const WRITES = { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false };

interface Entity {
  id: string;
  name: string;
  category: string;
  notes: string[];
  numbers: Record<string, number>;
  place: Record<string, string>;
}

interface Link {
  from: string;
  to: string;
  type: string;
}

/** The records server's starting data, drawn from its seed. */
function recordsData(spec: SyntheticSpec): { entities: Entity[]; links: Link[] } {
  const d = DOMAINS[spec.domain];
  const rng = makeRng(spec.seed);
  const names = shuffle(rng, d.first.flatMap((a) => d.second.map((b) => `${a} ${b}`))).slice(0, int(rng, 5, 8));
  const prefix = d.kind.slice(0, 2);
  const entities = names.map((name): Entity => ({
    id: `${prefix}-${String(int(rng, 100, 999))}`,
    name,
    category: pick(rng, d.categories),
    notes: shuffle(rng, d.notes).slice(0, int(rng, 1, 3)),
    numbers: Object.fromEntries(Object.entries(d.numbers).map(([k, [lo, hi]]) => [k, int(rng, lo, hi)])),
    place: { [d.place[0] === 'team' ? 'group' : 'name']: pick(rng, d.place[1]), area: pick(rng, d.place[2]) },
  }));
  const seen = new Set<string>();
  for (const e of entities) {
    while (seen.has(e.id)) e.id = `${prefix}-${String(int(rng, 100, 999))}`;
    seen.add(e.id);
  }
  const linkTypes = ['depends on', 'replaces', 'belongs with', 'is near'];
  const links = Array.from({ length: int(rng, 2, 4) }, (): Link => {
    const [a, b] = shuffle(rng, entities);
    return { from: a.name, to: b.name, type: pick(rng, linkTypes) };
  });
  return { entities, links };
}

/** A records server (see module comment), with state of its own. */
function recordsServer(spec: SyntheticSpec): McpServer {
  const d = DOMAINS[spec.domain];
  const rng = makeRng(spec.seed + 1);
  const { entities, links } = recordsData(spec);
  const s = spec.keyStyle;
  const server = new McpServer({ name: spec.name, version: '1.0.0' });
  const catKey = keyOf(s, d.kind, 'type');
  const notesKey = pick(rng, ['notes', 'facts', 'remarks']);
  const idKey = keyOf(s, d.kind, 'id');
  const [placeKey] = d.place;
  const view = (e: Entity) => ({
    ...(spec.keyedBy === 'id' ? { id: e.id } : {}), name: e.name, [catKey]: e.category, [notesKey]: e.notes, ...e.numbers, [placeKey]: e.place,
  });
  const brief = (e: Entity) => ({ ...(spec.keyedBy === 'id' ? { id: e.id } : {}), name: e.name, [catKey]: e.category });
  const byName = (n: string) => entities.find((e) => e.name.toLowerCase() === n.toLowerCase());
  const listKey = pick(rng, [d.plural, 'results', 'items']);

  const totalKey = keyOf(s, 'total', 'matches');
  const find = `${pick(rng, FIND_VERBS)}_${d.plural}`;
  server.registerTool(find, {
    description: pick(rng, [
      `Search the ${d.plural} by a word in their name, ${d.kind} type or ${notesKey}. Returns every match with its ${notesKey}.`,
      `Find ${d.plural} whose name, type or ${notesKey} contain the query (case-insensitive).`,
    ]),
    inputSchema: { query: z.string().describe(`Text to look for, e.g. "${entities[0].name.split(' ')[1]}".`) },
    annotations: READ_ONLY,
  }, async ({ query }) => {
    const q = query.toLowerCase();
    const hits = entities.filter((e) => [e.name, e.category, ...e.notes].some((t) => t.toLowerCase().includes(q)));
    return json({ [listKey]: hits.map(view), [totalKey]: hits.length });
  });

  if (spec.keyedBy === 'id') {
    server.registerTool(`${pick(rng, VIEW_VERBS)}_${d.kind}`, {
      description: `The full record of one ${d.kind}, by its id.`,
      inputSchema: { [idKey]: z.string().describe(`The ${d.kind}'s id, e.g. "${entities[0].id}".`) },
      annotations: READ_ONLY,
    }, async (args: Record<string, unknown>) => {
      const e = entities.find((x) => x.id === args[idKey]);
      return e ? json(view(e)) : fail(`No ${d.kind} with id ${String(args[idKey])}.`);
    });
  } else {
    server.registerTool(`open_${d.plural}`, {
      description: `The records of the ${d.plural} with these names (unknown names are skipped).`,
      inputSchema: { names: z.array(z.string()).describe(`Names of ${d.plural}.`) },
      annotations: READ_ONLY,
    }, async ({ names }) => json({ [listKey]: names.flatMap((n) => { const e = byName(n); return e ? [view(e)] : []; }) }));
  }

  server.registerTool(`list_${d.plural}`, {
    description: `List the ${d.plural}, optionally only those of one ${d.kind} type.`,
    inputSchema: { [catKey]: z.enum(d.categories as [string, ...string[]]).optional().describe(`Only ${d.plural} of this type.`) },
    annotations: READ_ONLY,
  }, async (args: Record<string, unknown>) => json({ [listKey]: entities.filter((e) => !args[catKey] || e.category === args[catKey]).map(brief) }));

  if (rng.uniform() < 0.6) {
    server.registerTool(`${pick(rng, ['read', 'dump', 'export'])}_${pick(rng, ['registry', 'catalogue', 'all'])}`, {
      description: `Everything this server holds: every ${d.kind} and every link between them.`,
      inputSchema: {},
      annotations: READ_ONLY,
    }, async () => json({ [listKey]: entities.map(view), links: links.map((l) => ({ from: l.from, to: l.to, [keyOf(s, 'link', 'type')]: l.type })) }));
  }

  const itemsKey = d.plural;
  server.registerTool(`${pick(rng, MAKE_VERBS)}_${d.plural}`, {
    description: `Create new ${d.plural}; each needs a name, a ${d.kind} type and its ${notesKey}.`,
    inputSchema: {
      [itemsKey]: z.array(z.object({
        name: z.string().describe(`The ${d.kind}'s name.`),
        [catKey]: z.string().describe(`What type of ${d.kind} it is.`),
        [notesKey]: z.array(z.string()).describe(`Things to remember about it.`),
      })).describe(`The ${d.plural} to create.`),
    },
    annotations: WRITES,
  }, async (args: Record<string, unknown>) => {
    const made: Entity[] = [];
    for (const it of args[itemsKey] as Record<string, unknown>[]) {
      if (byName(String(it.name))) continue;
      const e: Entity = { id: `${d.kind.slice(0, 2)}-${String(100 + entities.length + made.length)}`, name: String(it.name), category: String(it[catKey]), notes: (it[notesKey] as string[]) ?? [], numbers: {}, place: {} };
      made.push(e);
    }
    entities.push(...made);
    return json({ created: made.map(view) });
  });

  if (rng.uniform() < 0.8) {
    const targetKey = keyOf(s, d.kind, 'name');
    const contentsKey = pick(rng, ['contents', 'lines', 'texts']);
    const addKey = keyOf(s, 'new', notesKey);
    server.registerTool(`${pick(rng, ['add', 'append', 'attach'])}_${notesKey}`, {
      description: `Add ${notesKey} to existing ${d.plural}, found by name.`,
      inputSchema: {
        [addKey]: z.array(z.object({
          [targetKey]: z.string().describe(`The name of the ${d.kind} to add to.`),
          [contentsKey]: z.array(z.string()).describe(`The ${notesKey} to add.`),
        })).describe(`Which ${notesKey} go to which ${d.kind}.`),
      },
      annotations: WRITES,
    }, async (args: Record<string, unknown>) => {
      const out: unknown[] = [];
      for (const it of args[addKey] as Record<string, unknown>[]) {
        const e = byName(String(it[targetKey]));
        if (!e) return fail(`No ${d.kind} named ${String(it[targetKey])}.`);
        const added = (it[contentsKey] as string[]).filter((c) => !e.notes.includes(c));
        e.notes.push(...added);
        out.push({ [targetKey]: e.name, added });
      }
      return json(out);
    });
  }

  if (rng.uniform() < 0.6) {
    const typeKey = keyOf(s, 'link', 'type');
    server.registerTool(`link_${d.plural}`, {
      description: `Record links between ${d.plural}: from one name to another, with the kind of link in the active voice.`,
      inputSchema: {
        links: z.array(z.object({
          from: z.string().describe(`Name of the ${d.kind} the link starts at.`),
          to: z.string().describe(`Name of the ${d.kind} the link ends at.`),
          [typeKey]: z.string().describe('The kind of link, e.g. "depends on".'),
        })),
      },
      annotations: WRITES,
    }, async (args: Record<string, unknown>) => {
      const made = (args.links as Record<string, unknown>[]).map((l): Link => ({ from: String(l.from), to: String(l.to), type: String(l[typeKey]) }));
      links.push(...made);
      return json(made.map((l) => ({ from: l.from, to: l.to, [typeKey]: l.type })));
    });
  }
  return server;
}

/** The folder server's starting documents, by path under its root. */
function folderData(spec: SyntheticSpec): { root: string; files: Map<string, string>; folders: Set<string> } {
  const f = FOLDER_DOMAINS[spec.domain];
  const rng = makeRng(spec.seed);
  const root = `/${f.root}`;
  const files = new Map<string, string>();
  const folders = new Set([root, ...f.sub.map((x) => `${root}/${x}`)]);
  const ext = pick(rng, ['.md', '.txt']);
  for (const folder of folders) {
    for (const w of shuffle(rng, f.words).slice(0, int(rng, 1, 3))) {
      const lines = Array.from({ length: int(rng, 2, 5) }, () => `${pick(rng, f.words)} ${pick(rng, ['on Monday', 'is done', 'needs checking', 'costs 40', 'for next week', 'was moved'])}`);
      files.set(`${folder}/${w}${ext}`, `# ${w[0].toUpperCase()}${w.slice(1)}\n${lines.join('\n')}\n`);
    }
  }
  return { root, files, folders };
}

/** A folder server (see module comment), with state of its own. */
function folderServer(spec: SyntheticSpec): McpServer {
  const f = FOLDER_DOMAINS[spec.domain];
  const rng = makeRng(spec.seed + 1);
  const { root, files, folders } = folderData(spec);
  const s = spec.keyStyle;
  const server = new McpServer({ name: spec.name, version: '1.0.0' });
  const doc = f.docs.replace(/s$/, '');
  const pathKey = pick(rng, ['path', keyOf(s, doc, 'path')]);
  const inside = (p: string) => p === root || p.startsWith(`${root}/`);
  const pathArg = z.string().describe(`A path under ${root}, e.g. "${[...files.keys()][0]}".`);

  server.registerTool(`${pick(rng, ['list', 'show'])}_${pick(rng, ['folders', 'top_folders'])}`, {
    description: `The folders this server keeps ${f.docs} in, one path a line.`,
    inputSchema: {},
    annotations: READ_ONLY,
  }, async () => text([...folders].sort().join('\n')));

  server.registerTool(`${pick(rng, ['read', 'open', 'view'])}_${doc}`, {
    description: `The text of one ${doc}.`,
    inputSchema: { [pathKey]: pathArg },
    annotations: READ_ONLY,
  }, async (args: Record<string, unknown>) => {
    const t = files.get(String(args[pathKey]));
    return t === undefined ? fail(`No ${doc} at ${String(args[pathKey])}.`) : text(t);
  });

  const entries = (dir: string) => [...new Set([...folders, ...files.keys()].filter((p) => p.startsWith(`${dir}/`) && !p.slice(dir.length + 1).includes('/')))].sort();
  server.registerTool(`list_${pick(rng, ['folder', 'shelf', 'drawer'])}`, {
    description: `What a folder holds: its ${f.docs} and subfolders, one a line.`,
    inputSchema: { [pathKey]: pathArg },
    annotations: READ_ONLY,
  }, async (args: Record<string, unknown>) => {
    const dir = String(args[pathKey]);
    if (!folders.has(dir)) return fail(`No folder at ${dir}.`);
    return text(entries(dir).map((p) => `${folders.has(p) ? '[dir]' : `[${doc}]`} ${p.slice(dir.length + 1)}`).join('\n'));
  });

  server.registerTool(`${doc}_${pick(rng, ['info', 'details', 'stats'])}`, {
    description: `Facts about one ${doc}: its size, lines, words and folder.`,
    inputSchema: { [pathKey]: pathArg },
    annotations: READ_ONLY,
  }, async (args: Record<string, unknown>) => {
    const p = String(args[pathKey]);
    const t = files.get(p);
    if (t === undefined) return fail(`No ${doc} at ${p}.`);
    return json({ [pathKey]: p, size: { bytes: Buffer.byteLength(t), lines: t.trimEnd().split('\n').length, words: t.split(/\s+/).filter(Boolean).length }, folder: p.slice(0, p.lastIndexOf('/')), title: t.split('\n')[0].replace(/^# /, '') });
  });

  const patternKey = pick(rng, ['pattern', 'query', keyOf(s, 'name', 'contains')]);
  server.registerTool(`${pick(rng, FIND_VERBS)}_${f.docs}`, {
    description: `Paths of the ${f.docs} under a folder whose name contains the pattern.`,
    inputSchema: { [pathKey]: pathArg, [patternKey]: z.string().describe('Part of a file name, e.g. "budget".') },
    annotations: READ_ONLY,
  }, async (args: Record<string, unknown>) => {
    const dir = String(args[pathKey]);
    const pat = String(args[patternKey]).toLowerCase();
    if (!folders.has(dir)) return fail(`No folder at ${dir}.`);
    const hits = [...files.keys()].filter((p) => p.startsWith(`${dir}/`) && p.slice(p.lastIndexOf('/') + 1).toLowerCase().includes(pat)).sort();
    return json({ matches: hits });
  });

  server.registerTool(`${pick(rng, ['make', 'create', 'new'])}_folder`, {
    description: `Make a new folder under ${root}.`,
    inputSchema: { [pathKey]: pathArg },
    annotations: WRITES,
  }, async (args: Record<string, unknown>) => {
    const p = String(args[pathKey]);
    if (!inside(p) || !folders.has(p.slice(0, p.lastIndexOf('/')))) return fail(`Cannot make ${p}: its parent is not a folder under ${root}.`);
    folders.add(p);
    return text(`Made folder ${p}`);
  });

  if (rng.uniform() < 0.7) {
    const contentKey = pick(rng, ['content', 'text', 'body']);
    server.registerTool(`${pick(rng, ['write', 'save'])}_${doc}`, {
      description: `Write a new ${doc} (refused if one is already there).`,
      inputSchema: { [pathKey]: pathArg, [contentKey]: z.string().describe(`The ${doc}'s text.`) },
      annotations: WRITES,
    }, async (args: Record<string, unknown>) => {
      const p = String(args[pathKey]);
      if (files.has(p)) return fail(`A ${doc} is already at ${p}.`);
      if (!folders.has(p.slice(0, p.lastIndexOf('/')))) return fail(`No folder for ${p}.`);
      files.set(p, String(args[contentKey]));
      return text(`Wrote ${p}`);
    });
  }
  return server;
}

/** A fresh synthetic server for `spec`, with its starting data. */
export function createSyntheticServer(spec: SyntheticSpec): McpServer {
  return spec.shape === 'folder' ? folderServer(spec) : recordsServer(spec);
}

export interface SyntheticHost {
  /** The streamable-HTTP endpoint of synthetic server `index`: every MCP session there starts from fresh data. */
  url(index: number): string;
  close(): Promise<void>;
}

/**
 * Serves every synthetic server over streamable HTTP on a free port of 127.0.0.1 (`/<index>/mcp`), in this
 * process: one McpServer with fresh state per MCP session, so a session is one isolated rollout.
 */
export async function serveSynthetic(): Promise<SyntheticHost> {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  // A local HTTP server like any other: a web page the user visits must not reach it (foreign Host or Origin).
  const guard = createHttpGuard({ host: '127.0.0.1' });
  const http = createServer((req, res) => {
    void (async () => {
      try {
        const refused = guard.check(req);
        if (refused) return jsonRpcError(res, refused.status, `${refused.code}: ${refused.message}`);
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        const m = /^\/(\d+)\/mcp$/.exec(url.pathname);
        if (!m) return jsonRpcError(res, 404, 'Not found: the endpoints are /<index>/mcp');
        await handleMcpRequest(req, res, sessions, () => createSyntheticServer(syntheticSpec(Number(m[1]))));
      } catch (err) {
        if (!res.headersSent) jsonRpcError(res, 500, `Internal error: ${(err as Error).message}`);
        else res.end();
      }
    })();
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = http.address() as AddressInfo;
  return {
    url: (index) => `http://127.0.0.1:${port}/${index}/mcp`,
    close: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close()));
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
