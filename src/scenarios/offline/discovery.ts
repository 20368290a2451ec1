/**
 * Discovery: call the server's read-only tools that need no entity (listings, searches with an empty query, enum
 * filters) and harvest records, ids, names and paths from their output; then, for a few rounds, call every
 * read-only tool whose required arguments can all be filled from what is known, until a round finds nothing new.
 * What it found is where every task shape takes its arguments from.
 */
import type { ToolCallOutcome, ToolInfo } from '../../mcp/index.js';
import { synthesizeArgs, validates, type CandidateContext, type JsonSchema } from '../json-schema-args.js';
import { canonical, discoveryArgs, ENTITY_KEYS, entityKey, fixedCandidates, GLOB_NAMES, globsOf, MEDIA_FILE, pathKind, requiredNames, SEARCH_NAMES } from './arguments.js';
import type { Generation } from './generation.js';
import { LABEL_KEYS, leaves, listingLines, outcomeData, recordLabel, records, resultText } from './output.js';
import type { DiscoveredEntity, EntityRecord, Scalar } from './types.js';
import { isPlainObject, walkObjects } from './values.js';
import { idStem, isIdName, toolNoun, words } from './wording.js';

/** Parameters that take free text to pass on (an echo's message). */
const FREE_TEXT_NAMES = /^(message|msg|text|content|input|prompt|note|body)$/i;

/** Discovery rounds after the first (each feeds what the last one found back in), and calls per tool in each. */
const DISCOVERY_ROUNDS = 3;
const DISCOVERY_CALLS_PER_TOOL = 3;

/** Runs discovery on the generation's read-only tools. */
export async function discover(g: Generation): Promise<Discovery> {
  const known = new Discovery(g);
  for (const tool of g.tools) {
    for (const args of discoveryArgs(tool)) {
      if (g.disabled.has(tool.name)) break;
      known.harvest(tool.name, args, await g.call(tool.name, args));
    }
  }
  // Further rounds, to a bound: every read-only tool whose required arguments can all be filled from what is known
  // now (a listed id, a harvested name or path, a synthesized object of known values) is called and harvested,
  // until a round finds nothing new.
  for (let round = 0; round < DISCOVERY_ROUNDS; round++) {
    known.harvested = 0;
    for (const tool of g.tools) {
      for (const args of known.knownArgSets(tool, DISCOVERY_CALLS_PER_TOOL)) {
        if (g.disabled.has(tool.name)) break;
        known.harvest(tool.name, args, await g.call(tool.name, args));
      }
    }
    if (known.harvested === 0) break;
  }
  dedupeRecords(known.recs);
  return known;
}

/** What discovery found, and the argument values it offers a tool. */
export class Discovery {
  readonly recs: EntityRecord[] = [];
  readonly keyValues = new Map<string, Scalar[]>();
  /** Strings listed under a key (server-memory's observations): what a destructive write may name to remove. */
  readonly listValues = new Map<string, Scalar[]>();
  /** Plain-text results of calls on one path (a file's content), by that path. */
  readonly contentOf = new Map<string, { tool: string; args: Record<string, unknown>; text: string }>();
  /** Paths that a listing showed to be folders (their "content" is no file's). */
  readonly folders = new Set<string>();
  readonly entities: DiscoveredEntity[] = [];
  /** New values harvested in the current round. */
  harvested = 0;
  private labelledCache: { rec: EntityRecord; label: string }[] | undefined;

  constructor(private readonly g: Generation) {}

  harvest(tool: string, args: Record<string, unknown>, o: ToolCallOutcome): void {
    if (o.isError) return;
    const keep = (k: string, v: Scalar) => {
      const before = this.keyValues.get(k)?.length ?? 0;
      push(this.keyValues, k, v);
      if ((this.keyValues.get(k)?.length ?? 0) === before) return;
      this.harvested++;
      if (isIdName(k) || ENTITY_KEYS.has(k) || LABEL_KEYS.includes(k)) this.entities.push({ key: k, value: v, tool });
    };
    const data = outcomeData(o);
    for (const r of records(data, tool)) {
      this.recs.push(r);
      for (const [k, v] of Object.entries(r.fields)) keep(k, v);
    }
    for (const l of leaves(data)) keep(l.path[l.path.length - 1], l.value);
    // Every object anywhere in the result: its entity-like keys (name, path, uri, email, …) are worth trying.
    walkObjects(data, (obj) => {
      for (const [k, v] of Object.entries(obj)) {
        if (Array.isArray(v)) for (const x of v) if (typeof x === 'string' && x.length <= 200) push(this.listValues, k, x);
        const ek = entityKey(k);
        if (ek && typeof v === 'string' && v.length <= 200) keep(ek, v);
      }
    });
    // Absolute paths in plain text, and the entries of a listing below the folder it was asked about.
    if (data === undefined) {
      // What a tool that lists folders and takes no path names (list_allowed_directories) shows are folders.
      const listsFolders = /\b(director(y|ies)|folders?)\b/.test(words(tool).join(' ')) && !Object.keys(args).some((k) => entityKey(k) === 'path');
      for (const m of resultText(o).matchAll(/(?:^|\s)(\{sandbox\}(?:\/[^\s:,'"()]+)?|\/[^\s:,'"()]+)/g)) {
        keep('path', m[1]);
        if (listsFolders) this.folders.add(m[1]);
      }
    }
    const folder = Object.entries(args).find(([k, v]) => entityKey(k) === 'path' && typeof v === 'string')?.[1] as string | undefined;
    const listing = listingLines(resultText(o));
    if (folder && listing) {
      this.folders.add(folder);
      for (const e of listing) {
        keep('path', `${folder.replace(/\/+$/, '')}/${e.name}`);
        if (/^dir/.test(e.type)) this.folders.add(`${folder.replace(/\/+$/, '')}/${e.name}`);
      }
    }
    // The plain text a tool gave for a path (a file's content): what an edit may replace, and what names the file.
    if (folder && data === undefined && !this.contentOf.has(folder)) this.contentOf.set(folder, { tool, args, text: resultText(o) });
  }

  /** Up to `n` argument sets whose required values all come from discovery (never invented). */
  knownArgSets(tool: ToolInfo, n: number): Record<string, unknown>[] {
    const props = (tool.inputSchema.properties ?? {}) as Record<string, JsonSchema>;
    const required = requiredNames(tool);
    if (!required.length) return [];
    const options: unknown[][] = [];
    for (const r of required) {
      const s = props[r];
      if (!s) return [];
      let opts: unknown[] = [];
      if (Array.isArray(s.enum)) opts = [s.enum[0]];
      else if (SEARCH_NAMES.test(r) && (s.type === 'string' || s.type === undefined)) opts = [''];
      else if (s.type === 'array' || s.type === 'object') {
        // A required object or array is synthesized from its schema with discovered values, and kept only when
        // every string in it was discovered.
        for (let i = 0; i < n * 3 && opts.length < n; i++) {
          try {
            const v = synthesizeArgs({ type: 'object', properties: { [r]: s }, required: [r] }, { rng: this.g.rng, optionalRate: 0, candidates: this.candidates(tool) })[r];
            if (this.allStringsKnown(v) && !opts.some((o) => canonical(o) === canonical(v))) opts.push(v);
          } catch {
            break;
          }
        }
      } else opts = (this.candidates(tool)({ name: r, path: [r], schema: s }) ?? []).filter((v) => validates(s, v));
      if (!opts.length) return [];
      options.push(opts);
    }
    const sets: Record<string, unknown>[] = [];
    for (let i = 0; i < n; i++) {
      const args = Object.fromEntries(required.map((r, j) => [r, options[j][i % options[j].length]]));
      if (validates(tool.inputSchema, args) && !sets.some((a) => canonical(a) === canonical(args))) sets.push(args);
    }
    return sets;
  }

  private allStringsKnown(v: unknown): boolean {
    if (typeof v === 'string') return [...this.keyValues.values()].some((xs) => xs.includes(v));
    if (Array.isArray(v)) return v.length > 0 && v.every((x) => this.allStringsKnown(x));
    if (isPlainObject(v)) return Object.values(v).every((x) => this.allStringsKnown(x));
    return true;
  }

  private idCandidates(name: string, tool: ToolInfo): Scalar[] {
    const stem = idStem(name) ?? toolNoun(tool.name);
    const out: Scalar[] = [];
    for (const r of this.recs) {
      if (r.noun === stem && r.fields.id !== undefined) out.push(r.fields.id);
      for (const [k, v] of Object.entries(r.fields)) if (idStem(k) === stem) out.push(v);
    }
    out.push(...(this.keyValues.get(name) ?? []));
    return [...new Set(out)];
  }

  /** The discovered values an argument of `tool` may take (for synthesizeArgs), or undefined when none. */
  candidates = (tool: ToolInfo) => (ctx: CandidateContext): readonly unknown[] | undefined => {
    const name = ctx.name;
    if (!name) return undefined;
    const fixed = fixedCandidates(name, ctx.schema);
    if (fixed) return fixed;
    if (isIdName(name)) {
      const c = this.idCandidates(name, tool);
      return c.length ? c : undefined;
    }
    const ek = entityKey(name);
    if (ek === 'path' || name === 'path') {
      const paths = this.pathsFor(tool, this.keyValues.get(name) ?? this.keyValues.get('path') ?? []);
      if (paths.length) return paths;
    } else {
      const exact = this.keyValues.get(name);
      if (exact?.length) return exact;
      const byKey = ek ? this.keyValues.get(ek) : undefined;
      if (byKey?.length) return byKey;
    }
    if (GLOB_NAMES.test(name) || /\bglob\b/i.test(String(ctx.schema.description ?? ''))) {
      const globs = globsOf(this.keyValues.get('path') ?? []);
      if (globs.length) return globs;
    }
    if (SEARCH_NAMES.test(name)) {
      const ws = this.recs.flatMap((r) => (recordLabel(r)?.value.split(/\s+/) ?? []).filter((w) => w.length >= 4));
      return ws.length ? ws : undefined;
    }
    // Free text to pass on (an echo's message): something the server itself said, never stand-in text.
    if (FREE_TEXT_NAMES.test(name) && (ctx.schema.type === 'string' || ctx.schema.type === undefined)) {
      const said = [...this.keyValues.values()].flat().filter((v): v is string => typeof v === 'string' && /^[A-Za-z][\w ,.'-]{2,59}$/.test(v) && !this.isIdLike(v));
      return said.length ? [...new Set(said)] : undefined;
    }
    return undefined;
  };

  /**
   * The discovered paths a tool's path argument may take: folders for a tool about folders (list_directory,
   * directory_tree, search_files' starting folder), files for one about files, media files only for one that reads
   * media; all of them when the tool says neither (or when no folder is known).
   */
  private pathsFor(tool: ToolInfo, paths: readonly Scalar[]): Scalar[] {
    const kind = pathKind(tool);
    const isFolder = (p: Scalar) => this.folders.has(String(p));
    if (kind === 'folder') {
      const fs = paths.filter(isFolder);
      return fs.length ? fs : [...paths];
    }
    if (kind !== 'file') return [...paths];
    const files = paths.filter((p) => !isFolder(p));
    const media = files.filter((p) => MEDIA_FILE.test(String(p)));
    // A tool that reads media is given media only: a text file is no image, and its error no task.
    if (readsMedia(tool)) return media;
    const text = files.filter((p) => !MEDIA_FILE.test(String(p)));
    return text.length ? text : files;
  }

  /** Why no argument of `tool` can be found, when discovery knows: a media reader and no image or audio file seen. */
  missingReason(tool: ToolInfo): string | undefined {
    if (!readsMedia(tool) || pathKind(tool) !== 'file') return undefined;
    const paths = this.keyValues.get('path') ?? [];
    return paths.some((p) => MEDIA_FILE.test(String(p))) ? undefined : 'no image or audio file found';
  }

  /** Whether a value is an id or a code ("bk-001", "image/png") rather than words. */
  private isIdLike(v: string): boolean {
    return /\d/.test(v) && !/\s/.test(v);
  }

  /** Whether discovery saw the value. */
  isKnown = (v: string): boolean => [...this.keyValues.values()].some((xs) => xs.includes(v));

  /** Labels that identify exactly one record, so a task can name an entity instead of giving its id. */
  labelled(): { rec: EntityRecord; label: string }[] {
    this.labelledCache ??= this.uniqueLabels();
    return this.labelledCache;
  }

  private uniqueLabels(): { rec: EntityRecord; label: string }[] {
    const counts = new Map<string, number>();
    for (const r of this.recs) {
      const l = recordLabel(r)?.value.toLowerCase();
      if (l) counts.set(l, (counts.get(l) ?? 0) + 1);
    }
    return this.recs.flatMap((rec) => {
      const l = recordLabel(rec);
      return l && counts.get(l.value.toLowerCase()) === 1 ? [{ rec, label: l.value }] : [];
    });
  }

  /** How many discovered records hold `x` in a field or a list (1: it names its record). */
  owners(x: string): number {
    return this.recs.filter((r) => Object.values(r.fields).includes(x) || Object.values(r.lists ?? {}).some((xs) => xs.includes(x))).length;
  }
}

/** Whether a tool reads media (read_media_file, get_image): it is given image and audio files only. */
function readsMedia(tool: ToolInfo): boolean {
  return /\b(media|image|audio)\b/.test(words(tool.name).join(' '));
}

function push(m: Map<string, Scalar[]>, k: string, v: Scalar): void {
  const xs = m.get(k);
  if (!xs) m.set(k, [v]);
  else if (!xs.includes(v) && xs.length < 500) xs.push(v);
}

function dedupeRecords(recs: EntityRecord[]): void {
  // The same entity seen by several tools keeps one merged record per (noun, id or label).
  const byKey = new Map<string, EntityRecord>();
  const out: EntityRecord[] = [];
  for (const r of recs) {
    const id = r.fields.id ?? recordLabel(r)?.value;
    if (id === undefined) {
      out.push(r);
      continue;
    }
    const key = `${r.noun}\u0000${String(id)}`;
    const prev = byKey.get(key);
    if (prev) {
      Object.assign(prev.fields, r.fields);
      if (r.lists) prev.lists = { ...prev.lists, ...r.lists };
    }
    else {
      byKey.set(key, r);
      out.push(r);
    }
  }
  recs.splice(0, recs.length, ...out);
}
