/**
 * The general recipe's extra warm-up (build.ts `--recipe general`): offline scenarios of many synthetic servers
 * (synthetic-servers.ts), each worked by the general expert through the real rollout loop on a fresh MCP session of
 * its own, and the broad text its tokenizer also learns from.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { rollout } from '../../src/agent/rollout.js';
import type { McpTrajectory } from '../../src/agent/trajectory.js';
import { McpSession, SafetyPolicy } from '../../src/mcp/index.js';
import { scoreChecks } from '../../src/ruler/checks.js';
import { generateOfflineScenarios, type Scenario } from '../../src/scenarios/index.js';
import type { Habit } from './expert.js';
import { GeneralExpertPolicy } from './general-expert.js';
import { serveSynthetic, syntheticSpec } from './synthetic-servers.js';

export interface SyntheticWarmup {
  /** The expert's transcript of every scenario it solved. */
  transcripts: McpTrajectory[];
  /** The same scenarios with the habit `habitFor` drew. */
  mixed: McpTrajectory[];
  scenarios: Scenario[];
  /** Scenarios generated but left out: the expert's calls did not pass their checks. */
  unsolved: number;
  habits: Record<Habit, number>;
}

/**
 * Warm-up transcripts on synthetic servers 0 … servers-1, `perServer` scenarios asked of each (generated with seed
 * `seed + index`, write tasks included). Every rollout runs on a fresh session, so it starts from the server's data.
 */
export async function syntheticWarmup(opts: { servers: number; perServer: number; seed: number; habitFor: () => Habit; log: (msg: string) => void }): Promise<SyntheticWarmup> {
  const host = await serveSynthetic();
  // Each HTTP session is a server of its own with state in memory: writes there touch nothing else.
  const policy = new SafetyPolicy({ allowUnisolatedWrites: true });
  const open = (index: number) => McpSession.connect({ kind: 'http', url: host.url(index) }, { policy });
  const out: SyntheticWarmup = { transcripts: [], mixed: [], scenarios: [], unsolved: 0, habits: { expert: 0, guess: 0, forget: 0 } };
  try {
    for (let index = 0; index < opts.servers; index++) {
      const session = await open(index);
      const tools = await session.listTools();
      const { scenarios } = await generateOfflineScenarios(session, { count: opts.perServer, seed: opts.seed + index, isolatedServer: () => open(index) });
      await session.close();
      const run = async (scenario: Scenario, habit: Habit) => {
        const fresh = await open(index);
        try {
          return await rollout({ policy: new GeneralExpertPolicy(scenario, habit), session: fresh, tools, scenario, id: `warmup-${syntheticSpec(index).name}-${scenario.id}` });
        } finally {
          await fresh.close();
        }
      };
      let solved = 0;
      for (const scenario of scenarios) {
        const t = await run(scenario, 'expert');
        if (!t.metrics.completed || t.error || scoreChecks(t, scenario).fraction < 1) {
          out.unsolved++;
          continue;
        }
        const habit = opts.habitFor();
        out.habits[habit]++;
        out.transcripts.push(t);
        out.mixed.push(habit === 'expert' ? t : await run(scenario, habit));
        out.scenarios.push({ ...scenario, id: `${syntheticSpec(index).name}-${scenario.id}` });
        solved++;
      }
      opts.log(`synthetic server ${index} (${syntheticSpec(index).name}, ${tools.length} tools): ${solved} of ${scenarios.length} scenarios solved by the expert`);
    }
  } finally {
    await host.close();
  }
  return out;
}

/** Packages whose text must not reach the general model: the published servers it is trained on afterwards. */
const HELD_OUT = /@modelcontextprotocol[\\/]server-(memory|filesystem)/;

/**
 * Up to `maxChars` of the markdown documentation under `node_modules` (READMEs and docs of the installed packages,
 * in an order fixed by their paths, each cut to `perFile`), for a tokenizer that has seen English and code beyond one server's
 * transcripts. The held-out published servers' own documentation is left out.
 */
export async function docsCorpus(root: string, maxChars: number, perFile = 12_000): Promise<string[]> {
  const dir = join(root, 'node_modules');
  const files = (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile() && /\.md$/i.test(e.name))
    .map((e) => join(e.parentPath, e.name))
    .filter((f) => !HELD_OUT.test(f))
    // in an order that mixes packages (by a hash of the path), so a cap does not keep only the first few
    .map((f) => ({ f, key: createHash('sha1').update(relative(dir, f)).digest('hex') }))
    .sort((a, b) => a.key.localeCompare(b.key))
    .map((x) => x.f);
  const out: string[] = [];
  let total = 0;
  for (const f of files) {
    if (total >= maxChars) break;
    const t = (await readFile(f, 'utf8')).slice(0, perFile);
    out.push(t);
    total += t.length;
  }
  return out;
}
