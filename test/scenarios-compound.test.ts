/**
 * Compound write tasks ("record that A owns B and record that C works at D"): every part asks something the others
 * do not, on server-memory seeded with the demo's graph, on an empty one (where a task adds people first) and on the
 * fixture. Arguments are drawn as the generator draws them (writeArgs on a discovered server), many seeds each.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { publishedTarget, writeTargetInputs } from '../scripts/demo-targets.js';
import { connect, SafetyPolicy, type Target } from '../src/mcp/index.js';
import { discover } from '../src/scenarios/offline/discovery.js';
import { startGeneration } from '../src/scenarios/offline/generation.js';
import { madeBy, writeArgs } from '../src/scenarios/offline/write.js';
import { fixtureStdioTarget, REPO_ROOT } from './helpers/servers.js';

/** The ways two parts of one request repeat each other, as found in `args` (empty: none). */
function repeats(args: Record<string, unknown>): string[] {
  const out: string[] = [];
  const visit = (v: unknown): void => {
    if (Array.isArray(v)) {
      const keys = v.map((x) => JSON.stringify(x));
      if (new Set(keys).size < keys.length) out.push(`an item twice: ${JSON.stringify(v)}`);
      const objs = v.filter((x): x is Record<string, unknown> => !!x && typeof x === 'object' && !Array.isArray(x));
      // Two records about one thing, or two links between the same two things, are one request said twice.
      const about = objs.map((o) => (typeof o.from === 'string' ? `${o.from} → ${o.to}` : String(o.name ?? o.entityName ?? '')));
      if (about.every(Boolean) && new Set(about).size < about.length) out.push(`one thing twice: ${JSON.stringify(v)}`);
      v.forEach(visit);
    } else if (v && typeof v === 'object') Object.values(v).forEach(visit);
  };
  visit(args);
  return out;
}

/** Each note a write gives a thing, as "thing: note" (entities' observations, add_observations' contents). */
function notes(args: Record<string, unknown>): string[] {
  const out: string[] = [];
  const visit = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(visit);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      const list = o.observations ?? o.contents;
      if (typeof (o.name ?? o.entityName) === 'string' && Array.isArray(list)) for (const n of list) out.push(`${String(o.name ?? o.entityName)}: ${String(n)}`);
      else Object.values(o).forEach(visit);
    }
  };
  visit(args);
  return out;
}

async function memoryTarget(graph?: string): Promise<{ target: Target; source: string }> {
  const t = publishedTarget('memory');
  if (graph !== undefined) t.files = { 'memory.jsonl': graph };
  const { source } = await writeTargetInputs(t, await mkdtemp(path.join(tmpdir(), 'mcprl-compound-')));
  return { target: { kind: 'stdio', command: t.server.command, args: t.server.args, env: t.server.env, cwd: REPO_ROOT }, source };
}

/** writeArgs for every write tool at seeds 1..n (and, for a tool that uses what another makes, after each maker). */
async function drawn(target: Target, sandboxFrom: string | undefined, n: number): Promise<Record<string, unknown>[]> {
  const session = await connect(target, { sandboxFrom, policy: new SafetyPolicy({}) });
  try {
    const writes = (await session.listTools()).filter((t) => t.annotations.readOnlyHint !== true && t.annotations.destructiveHint === false);
    const out: Record<string, unknown>[] = [];
    for (let seed = 1; seed <= n; seed++) {
      const g = await startGeneration(session, { seed });
      const known = await discover(g);
      for (const tool of writes) {
        const args = writeArgs(g, known, tool);
        if (!args) continue;
        out.push(args);
        if (!madeBy(known, args).size) continue;
        for (const user of writes) {
          const used = user === tool ? undefined : writeArgs(g, known, user, args);
          // The second part of a make → use request says something the first did not (no note given twice).
          if (used) out.push(used, { parts: [...notes(args), ...notes(used)] });
        }
      }
    }
    return out;
  } finally {
    await session.close();
  }
}

describe('compound write tasks never repeat a part', () => {
  it('server-memory seeded with the demo\'s graph', async () => {
    const { target, source } = await memoryTarget();
    const all = await drawn(target, source, 60);
    expect(all.filter((a) => Object.values(a).some((v) => Array.isArray(v) && v.length > 1)).length).toBeGreaterThan(20);
    expect(all.flatMap(repeats)).toEqual([]);
  }, 300_000);

  it('server-memory, empty', async () => {
    const { target, source } = await memoryTarget('');
    const all = await drawn(target, source, 60);
    expect(all.length).toBeGreaterThan(20);
    expect(all.flatMap(repeats)).toEqual([]);
  }, 300_000);

  it('the fixture', async () => {
    const all = await drawn(fixtureStdioTarget(), undefined, 30);
    expect(all.length).toBeGreaterThan(10);
    expect(all.flatMap(repeats)).toEqual([]);
  }, 300_000);
});
