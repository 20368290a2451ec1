/**
 * A scenario set for a connected server: generated (from the schemas, or by an LLM), then split into train
 * and val, with a summary of what was made and dropped. `mcprl scenarios`, `mcprl train` and the MCP server's
 * generate_scenarios tool all make their sets here.
 */
import type { McpSession } from '../mcp/index.js';
import { generateLlmScenarios, ScenarioGenerationError } from './llm.js';
import { generateOfflineScenarios } from './offline.js';
import type { Scenario } from './scenario.js';
import { DEFAULT_VAL_FRACTION, splitScenarios } from './split.js';

export interface ScenarioSetOptions {
  /** Scenarios wanted in total (train + val). Default 24. */
  count?: number;
  /** Seed for generation and the split. Default 1. */
  seed?: number;
  /** Share held out for validation. Default 1/3. */
  valFraction?: number;
  /** Schema-driven verifiable scenarios (no LLM). */
  offline?: boolean;
  /** LLM settings (required unless offline). */
  generator?: { baseURL?: string; model: string; apiKey?: string };
  instructions?: string;
}

export interface ScenarioSummary {
  total: number;
  train: number;
  val: number;
  byDifficulty: Record<'1' | '2' | '3' | '4' | '5', number>;
  bySource: { llm: number; schema: number };
  droppedDuplicates: number;
  droppedUnverifiable: number;
  droppedInvalid: number;
  /** Tools the offline generator did not call, with why. */
  skippedTools: { tool: string; reason: string }[];
}

/** Generates and splits a scenario set for a connected server (the command's work, minus I/O). */
export async function generateScenarioSet(
  session: McpSession,
  opts: ScenarioSetOptions,
): Promise<{ train: Scenario[]; val: Scenario[]; summary: ScenarioSummary }> {
  const count = opts.count ?? 24;
  const seed = opts.seed ?? 1;
  let scenarios: Scenario[];
  let droppedDuplicates: number;
  let droppedUnverifiable = 0;
  let droppedInvalid = 0;
  let skippedTools: { tool: string; reason: string }[] = [];
  if (opts.offline) {
    const r = await generateOfflineScenarios(session, { count, seed });
    ({ scenarios, droppedDuplicates, droppedUnverifiable, skippedTools } = r);
  } else {
    if (!opts.generator?.model) throw new ScenarioGenerationError('--generator-model is required unless --offline is given');
    const tools = await session.listTools();
    const resources = await session.listResources().catch(() => []);
    const r = await generateLlmScenarios(
      { serverName: session.server.name, tools, resources: resources.map((x) => ({ uri: x.uri, name: x.name, description: x.description })) },
      { ...opts.generator, count, seed, instructions: opts.instructions },
    );
    ({ scenarios, droppedDuplicates, droppedInvalid } = r);
  }
  const { train, val } = splitScenarios(scenarios, { valFraction: opts.valFraction ?? DEFAULT_VAL_FRACTION, seed });
  const byDifficulty = { '1': 0, '2': 0, '3': 0, '4': 0, '5': 0 };
  const bySource = { llm: 0, schema: 0 };
  for (const s of scenarios) {
    byDifficulty[String(s.difficulty) as keyof typeof byDifficulty]++;
    bySource[s.source]++;
  }
  return {
    train,
    val,
    summary: { total: scenarios.length, train: train.length, val: val.length, byDifficulty, bySource, droppedDuplicates, droppedUnverifiable, droppedInvalid, skippedTools },
  };
}
