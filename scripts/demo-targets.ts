/**
 * The published servers `npm run demo -- --target memory|filesystem` trains on, each from node_modules and sandboxed:
 * the demo writes the data the server starts from (a small knowledge graph, a folder of notes), and every session
 * gets a copy of it in a `{sandbox}` of its own (--isolate --sandbox-from), so the written data is only ever read.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
const PUBLISHED = join(ROOT, 'node_modules', '@modelcontextprotocol');

export const DEMO_TARGETS = ['bookshop', 'memory', 'filesystem'] as const;
export type DemoTargetName = (typeof DEMO_TARGETS)[number];

export interface PublishedTarget {
  name: Exclude<DemoTargetName, 'bookshop'>;
  /** What the demo says it trains on. */
  label: string;
  /** The server as an mcpServers entry (mcp.json): `{sandbox}` is where it keeps its state. */
  server: { command: string; args: string[]; env?: Record<string, string> };
  /** The files every sandbox starts from, by path relative to the sandbox (text, or bytes for an image). */
  files: Record<string, string | Uint8Array>;
}

const entity = (name: string, entityType: string, observations: string[]) => JSON.stringify({ type: 'entity', name, entityType, observations });
const relation = (from: string, relationType: string, to: string) => JSON.stringify({ type: 'relation', from, to, relationType });

/** A small team's knowledge graph in server-memory's JSONL format: people, projects, places and how they relate. */
const MEMORY_GRAPH = [
  entity('Mira Okafor', 'person', ['leads the data platform team', 'joined in March 2021', 'prefers written updates']),
  entity('Tomas Lindqvist', 'person', ['backend engineer', 'on call in the first week of each month']),
  entity('Priya Raman', 'person', ['product manager', 'runs the Thursday planning meeting']),
  entity('Atlas', 'project', ['migrates billing to the new ledger', 'due at the end of Q1', 'budget of 40,000 EUR']),
  entity('Beacon', 'project', ['customer status page', 'launched in October']),
  entity('Lisbon office', 'place', ['opened in 2019', 'hosts the quarterly offsite']),
  relation('Mira Okafor', 'manages', 'Tomas Lindqvist'),
  relation('Mira Okafor', 'owns', 'Atlas'),
  relation('Tomas Lindqvist', 'works on', 'Atlas'),
  relation('Priya Raman', 'owns', 'Beacon'),
  relation('Priya Raman', 'works at', 'Lisbon office'),
].join('\n') + '\n';

/** A 4×4 PNG (a harbour-blue square): the folder's one image, so that server-filesystem's media reader has one. */
const HARBOUR_PNG = Buffer.from(
  '89504e470d0a1a0a0000000d4948445200000004000000040802000000269309290000001049444154789c63908b5a00470cc47100bf23118125cd8ffb0000000049454e44ae426082',
  'hex',
);

/** A folder of notes as a person keeps one: markdown, plain text, JSON and a photo, two subfolders. */
const NOTES: Record<string, string | Uint8Array> = {
  'README.md': '# Household notes\n\nBills, trips and recipes. The budget is in budget.json; trips are in trips/.\n',
  'todo.txt': 'renew the car insurance before 14 January\nbook the boiler service\nreturn the library books\n',
  'budget.json': JSON.stringify({ currency: 'EUR', month: '2026-12', rent: 1150, groceries: 420, transport: 95, savings: 300 }, null, 2) + '\n',
  'recipes.md': '# Recipes\n\n## Lentil soup\nRed lentils, carrots, cumin; simmer 25 minutes.\n\n## Pancakes\nFlour, milk, two eggs, a pinch of salt.\n',
  'trips/porto.md': '# Porto, May 2026\n\nTrain from Lisbon at 09:05. Hotel near Ribeira, 3 nights.\n',
  'trips/packing.txt': 'passport\nphone charger\nrain jacket\n',
  'trips/photos/harbour.png': HARBOUR_PNG,
};

/** The published targets by name; `node` is the interpreter that runs them (the demo's own). */
export function publishedTarget(name: PublishedTarget['name'], node = process.execPath): PublishedTarget {
  if (name === 'memory') {
    return {
      name, label: 'the published server-memory (MEMORY_FILE_PATH={sandbox}/memory.jsonl, seeded with a knowledge graph of 6 entities and 5 relations)',
      server: { command: node, args: [join(PUBLISHED, 'server-memory', 'dist', 'index.js')], env: { MEMORY_FILE_PATH: '{sandbox}/memory.jsonl' } },
      files: { 'memory.jsonl': MEMORY_GRAPH },
    };
  }
  return {
    name, label: `the published server-filesystem serving {sandbox}, a copy of a folder of ${Object.keys(NOTES).length} notes and photos`,
    server: { command: node, args: [join(PUBLISHED, 'server-filesystem', 'dist', 'index.js'), '{sandbox}'] },
    files: NOTES,
  };
}

/** Writes the target's files under `dir` (the folder every sandbox copies) and its mcp.json beside it; returns both paths. */
export async function writeTargetInputs(t: PublishedTarget, dir: string): Promise<{ source: string; config: string }> {
  const source = join(dir, 'source');
  for (const [file, text] of Object.entries(t.files)) {
    await mkdir(dirname(join(source, file)), { recursive: true });
    await writeFile(join(source, file), text);
  }
  await mkdir(source, { recursive: true });
  const config = join(dir, 'mcp.json');
  await writeFile(config, JSON.stringify({ mcpServers: { [t.name]: t.server } }, null, 2) + '\n');
  return { source, config };
}

/** sha256 of every file under `dir`, by relative path: to show that the sandboxes never wrote to it. */
export async function folderDigest(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const file = join(e.parentPath, e.name);
    out[relative(dir, file)] = createHash('sha256').update(await readFile(file)).digest('hex');
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => a.localeCompare(b)));
}
