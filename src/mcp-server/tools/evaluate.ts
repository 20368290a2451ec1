/** evaluate: the trained agent on scenarios against an MCP server, scored by their checks, written to evals/. */
import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { AGENT_TOOL_ROLLOUT_DEFAULTS } from '../../agent/rollout-settings.js';
import { runEval, writeEvalOutput, formatEvalSummary } from '../../eval/evaluate.js';
import { loadScenarioSet, readScenarios, type Scenario } from '../../scenarios/scenario.js';
import { McprlError } from '../../util/errors.js';
import { resolveAgent } from '../agent.js';
import type { McprlServerContext } from '../context.js';
import { Workspace } from '../workspace.js';
import { AgentInput, rolloutFields } from './agent-input.js';
import { isolationFor, targetFromInput, TargetInput } from './target-input.js';
import { guarded, ok, stamp } from './tool-kit.js';

const EvalSummaryOutput = z.object({
  model: z.string(),
  reward_mode: z.string(),
  scenarios: z.number(),
  rollouts_per_group: z.number(),
  trajectories: z.number(),
  success_rate: z.number(),
  successes: z.number(),
  mean_reward: z.number().nullable(),
  tool_call_validity_rate: z.number(),
  tool_calls: z.number(),
  invalid_calls: z.number(),
  tool_errors: z.number(),
  unknown_outcomes: z.number().describe('Calls whose outcome is unknown (connection lost, timed out mid-call): counted as failures'),
  mean_turns: z.number(),
  completed_rate: z.number(),
  ran_out_of_turns: z.number(),
  judge_groups: z.number(),
  judge_failures: z.number(),
  unscored_trajectories: z.number(),
  rollout_errors: z.number(),
  duration_ms: z.number(),
  per_scenario: z.array(z.object({ scenario_id: z.string(), success_rate: z.number(), mean_reward: z.number().nullable() })),
});

/** A scenario set folder or one .jsonl file in the workspace. */
async function scenariosFrom(ws: Workspace, where: string, split: 'train' | 'val' | 'all'): Promise<Scenario[]> {
  const abs = ws.resolve(where, 'scenarios');
  if (!existsSync(abs)) throw new McprlError('WORKSPACE', `scenarios ${JSON.stringify(where)} not found in the workspace`);
  if ((await stat(abs)).isFile()) return readScenarios(abs);
  const set = await loadScenarioSet(abs);
  return split === 'train' ? set.train : split === 'val' ? set.val : [...set.train, ...set.val];
}

export function registerEvaluate(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerTool(
    'evaluate',
    {
      title: 'Evaluate an agent',
      description:
        'Run the trained agent (a run, or a model with an adapter) on scenarios against an MCP server and score it with the ' +
        "scenarios' verifiable checks. Default scenarios: the run's validation set. Writes evals/<name>/{trajectories.jsonl,summary.json}.",
      inputSchema: {
        target: TargetInput,
        ...AgentInput,
        scenarios: z.string().optional().describe('Scenario set folder or .jsonl file in the workspace'),
        split: z.enum(['train', 'val', 'all']).default('val'),
        limit: z.number().int().positive().optional(),
        rollouts: z.number().int().positive().max(16).default(1),
        max_turns: rolloutFields.maxTurns.max(50).optional(),
        max_tokens: rolloutFields.maxTokens.optional(),
        temperature: rolloutFields.temperature.default(AGENT_TOOL_ROLLOUT_DEFAULTS.temperature),
        concurrency: rolloutFields.concurrency.max(32).default(AGENT_TOOL_ROLLOUT_DEFAULTS.concurrency),
        name: z.string().optional().describe('Folder name under evals/ (default a timestamp)'),
      },
      outputSchema: { agent: z.string(), summary: EvalSummaryOutput, files: z.object({ trajectories: z.string(), summary: z.string() }) },
      // The agent calls the target's tools: only those the operator's safety policy allows (by default read-only and
      // additive ones), so it can change the target's state but not destroy it.
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    guarded(async (a) => {
      const t = targetFromInput(ws, a.target, ctx.allowCommands);
      const agent = await resolveAgent(ws, a);
      let scenarios: Scenario[];
      if (a.scenarios !== undefined) scenarios = await scenariosFrom(ws, a.scenarios, a.split);
      else if (a.run !== undefined) scenarios = await scenariosFrom(ws, path.join(a.run, 'scenarios'), a.split);
      else throw new McprlError('WORKSPACE', 'give scenarios (or a run, whose validation set is used)');
      if (a.limit !== undefined) scenarios = scenarios.slice(0, a.limit);
      if (scenarios.length === 0) throw new McprlError('WORKSPACE', 'no scenarios to evaluate');
      const outName = Workspace.checkName(a.name ?? `${a.run ?? 'model'}-${stamp()}`, 'evaluation name');
      const out = ws.resolve(path.join('evals', outName), 'evaluation folder');
      if (existsSync(out)) throw new McprlError('WORKSPACE', `evals/${outName} already exists; choose another name`);
      const maxTurns = a.max_turns ?? agent.runConfig?.maxTurns ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTurns;
      const maxTokens = a.max_tokens ?? agent.runConfig?.maxTokens ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTokens;
      const { groups, summary } = await ctx.engines.with(agent, { maxTokens, temperature: a.temperature }, (policy) =>
        runEval({
          policy, target: t, scenarios, reward: 'checks', rolloutsPerGroup: a.rollouts, concurrency: a.concurrency,
          policyForSafety: ctx.safety, ...isolationFor(ws, a.target, t), maxTurns, seed: 1,
        }),
      );
      const files = await writeEvalOutput(out, groups, summary);
      return ok(
        { agent: agent.label, summary: summary as unknown as Record<string, unknown>, files: { trajectories: ws.display(files.trajectories), summary: ws.display(files.summary) } },
        formatEvalSummary(summary),
      );
    }),
  );
}
