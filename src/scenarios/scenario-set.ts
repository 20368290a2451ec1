/**
 * A scenario set for a connected server: generated (from the schemas, or by an LLM), then split into train
 * and val (and test, when a share is held out for it), with a summary of what was made and dropped. `mcprl scenarios`, `mcprl train` and the MCP server's
 * generate_scenarios tool all make their sets here.
 */
import { z } from 'zod';
import type { McpSession } from '../mcp/index.js';
import { InfeasibleCountsSchema, scenariosPerTool, ToolCoverageSchema, type InfeasibleCounts, type ToolCoverage } from './coverage.js';
import { createGrounder } from './grounded.js';
import { generateLlmScenarios, ScenarioGenerationError } from './llm.js';
import { generateOfflineScenarios, type OfflineOptions } from './offline/index.js';
import { rephraseTasks, RephrasingSchema, type Rephrasing } from './rephrase.js';
import { isStateCheck, type Scenario } from './scenario.js';
import { DEFAULT_VAL_FRACTION, splitScenarios } from './split.js';

export interface ScenarioSetOptions {
  /** Scenarios wanted in total (train + val). Default 24. */
  count?: number;
  /** Seed for generation and the split. Default 1. */
  seed?: number;
  /** Share held out for validation. Default 1/3. */
  valFraction?: number;
  /** Share held out for the test set, which no decision sees (mcprl train measures it at the start and the end). Default 0: no test set. */
  testFraction?: number;
  /** Schema-driven verifiable scenarios (no LLM). */
  offline?: boolean;
  /** LLM settings: the model writes the tasks (required unless offline), or with offline rewords each (see rephrase.ts). */
  generator?: { baseURL?: string; model: string; apiKey?: string; timeoutMs?: number };
  instructions?: string;
  /** Opens a fresh isolated server: offline generation then makes write tasks too (see OfflineOptions). */
  isolatedServer?: OfflineOptions['isolatedServer'];
}

const count = z.number().int().nonnegative();

/** What a generated scenario set holds and what was dropped: `--json` prints it, people read formatSummary's rendering. */
export const ScenarioSummarySchema = z.object({
  total: count,
  train: count,
  val: count,
  test: count,
  byDifficulty: z.object({ '1': count, '2': count, '3': count, '4': count, '5': count }),
  bySource: z.object({ llm: count, schema: count }),
  /** Candidates dropped as the same as (or a near-paraphrase of) one already kept. */
  droppedDuplicates: count,
  /** Candidates dropped because a call failed or the replay did not reproduce their expected values. */
  droppedUnverifiable: count,
  /** LLM tasks among droppedUnverifiable, by why the replay of their solution did not show them feasible. */
  droppedInfeasible: InfeasibleCountsSchema,
  /** LLM items that were not valid scenarios. */
  droppedInvalid: count,
  /** Per tool of the server: scenarios made and, for a tool with none, why. */
  coverage: z.array(ToolCoverageSchema),
  /** Offline tasks a generator model reworded (only when one was given with offline). */
  rephrasing: RephrasingSchema.optional(),
});
export type ScenarioSummary = z.infer<typeof ScenarioSummarySchema>;

/** Generates and splits a scenario set for a connected server (the command's work, minus I/O). */
export async function generateScenarioSet(
  session: McpSession,
  opts: ScenarioSetOptions,
): Promise<{ train: Scenario[]; val: Scenario[]; test: Scenario[]; summary: ScenarioSummary }> {
  const count = opts.count ?? 24;
  const seed = opts.seed ?? 1;
  let scenarios: Scenario[];
  let droppedDuplicates: number;
  let droppedUnverifiable: number;
  let droppedInvalid = 0;
  let droppedInfeasible: InfeasibleCounts = {};
  let coverage: ToolCoverage[];
  let rephrasing: Rephrasing | undefined;
  if (opts.offline) {
    const r = await generateOfflineScenarios(session, { count, seed, isolatedServer: opts.isolatedServer });
    ({ scenarios, droppedDuplicates, droppedUnverifiable, coverage } = r);
    // Reworded before the split, which keeps near-duplicate tasks on one side by their words.
    if (opts.generator?.model && scenarios.length) ({ scenarios, rephrasing } = await rephraseTasks(scenarios, await session.listTools(), { ...opts.generator, seed }));
  } else {
    if (!opts.generator?.model) throw new ScenarioGenerationError('--generator-model is required unless --offline is given');
    const tools = await session.listTools();
    const resources = await session.listResources().catch(() => []);
    // The same discovery as offline generation: the LLM builds on what exists, and each task's solution is replayed.
    const grounder = await createGrounder(session, { seed, isolatedServer: opts.isolatedServer });
    const r = await generateLlmScenarios(
      { serverName: session.server.name, tools, resources: resources.map((x) => ({ uri: x.uri, name: x.name, description: x.description })) },
      { ...opts.generator, count, seed, instructions: opts.instructions, ground: { entities: grounder.entities, check: grounder.ground } },
    );
    ({ scenarios, droppedDuplicates, droppedInvalid, droppedInfeasible } = r);
    droppedUnverifiable = Object.values(droppedInfeasible).reduce((a, n) => a + n, 0);
    const made = scenariosPerTool(scenarios);
    const stateChecked = scenariosPerTool(scenarios.filter((s) => s.checks?.some(isStateCheck)));
    coverage = tools.map((t) => {
      const n = made.get(t.name) ?? 0;
      return n > 0
        ? { tool: t.name, scenarios: n, stateChecked: stateChecked.get(t.name) ?? 0 }
        : { tool: t.name, scenarios: 0, stateChecked: 0, reason: 'not_in_llm_tasks' as const };
    });
  }
  const { train, val, test } = splitThreeWays(scenarios, opts.valFraction ?? DEFAULT_VAL_FRACTION, opts.testFraction ?? 0, seed);
  const byDifficulty = { '1': 0, '2': 0, '3': 0, '4': 0, '5': 0 };
  const bySource = { llm: 0, schema: 0 };
  for (const s of scenarios) {
    byDifficulty[String(s.difficulty) as keyof typeof byDifficulty]++;
    bySource[s.source]++;
  }
  return {
    train,
    val,
    test,
    summary: {
      total: scenarios.length, train: train.length, val: val.length, test: test.length, byDifficulty, bySource,
      droppedDuplicates, droppedUnverifiable, droppedInfeasible, droppedInvalid, coverage, ...(rephrasing ? { rephrasing } : {}),
    },
  };
}

/**
 * Test first, then validation out of the rest, each a share of the whole set and kept apart as splitScenarios keeps
 * train and val apart. Without a test share the split is splitScenarios's own, so sets made before stay the same.
 */
function splitThreeWays(scenarios: readonly Scenario[], valFraction: number, testFraction: number, seed: number): { train: Scenario[]; val: Scenario[]; test: Scenario[] } {
  if (!(testFraction >= 0 && valFraction + testFraction < 1)) {
    throw new RangeError(`the validation share (${valFraction}) and the test share (${testFraction}) must leave scenarios to train on (their sum below 1)`);
  }
  const { train: rest, val: test } = splitScenarios(scenarios, { valFraction: testFraction, seed });
  const { train, val } = splitScenarios(rest, { valFraction: valFraction / (1 - testFraction), seed });
  return { train, val, test };
}
