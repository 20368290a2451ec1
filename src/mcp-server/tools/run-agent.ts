/** run_agent: the trained agent performs one task on an MCP server; its answer and a compact trace. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { rollout } from '../../agent/rollout.js';
import { AGENT_TOOL_ROLLOUT_DEFAULTS } from '../../agent/rollout-settings.js';
import { compactTrace, resolveAgent } from '../agent.js';
import type { McprlServerContext } from '../context.js';
import { AgentInput, rolloutFields } from './agent-input.js';
import { isolationFromInput, targetFromInput, TargetInput, withSession } from './target-input.js';
import { guarded, ok } from './tool-kit.js';

export function registerRunAgent(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerTool(
    'run_agent',
    {
      title: 'Run the trained agent on a task',
      description: 'The trained agent (a run, or a model with an adapter) performs one task on an MCP server; returns its final answer and a compact trace.',
      inputSchema: {
        target: TargetInput,
        task: z.string().min(1).describe('What the agent should do, in plain words'),
        ...AgentInput,
        max_turns: rolloutFields.maxTurns.max(50).optional(),
        max_tokens: rolloutFields.maxTokens.optional(),
        temperature: rolloutFields.temperature.default(AGENT_TOOL_ROLLOUT_DEFAULTS.temperature),
      },
      outputSchema: {
        agent: z.string(),
        final_answer: z.string().nullable(),
        completed: z.boolean(),
        turns: z.number().int(),
        tool_calls: z.number().int(),
        tool_errors: z.number().int(),
        invalid_calls: z.number().int(),
        error: z.string().nullable(),
        trace: z.array(z.object({ kind: z.enum(['assistant', 'tool_call', 'tool_result']), name: z.string().optional(), text: z.string() })),
      },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    guarded(async (a, extra) => {
      const t = targetFromInput(ws, a.target, ctx.allowCommands);
      const agent = await resolveAgent(ws, a);
      const maxTurns = a.max_turns ?? agent.runConfig?.maxTurns ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTurns;
      const maxTokens = a.max_tokens ?? agent.runConfig?.maxTokens ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTokens;
      // One rollout on a session of its own: with isolate, that server is this rollout's alone.
      const traj = await withSession(ctx, t, isolationFromInput(ws, a.target), async (session) => {
        const tools = await session.listTools();
        return ctx.engines.with(agent, { maxTokens, temperature: a.temperature }, (policy) =>
          rollout({
            policy, session, tools, scenario: { id: 'task', task: a.task, difficulty: 1, source: 'llm' },
            maxTurns, seed: 1, signal: extra.signal,
          }),
        );
      }, true);
      const result = {
        agent: agent.label,
        final_answer: traj.final_answer,
        completed: traj.metrics.completed,
        turns: traj.metrics.turns,
        tool_calls: traj.metrics.tool_calls,
        tool_errors: traj.metrics.tool_errors,
        invalid_calls: traj.metrics.invalid_calls,
        error: traj.error ?? null,
        trace: compactTrace(traj),
      };
      return ok(result, `final answer: ${traj.final_answer ?? '(none)'}`);
    }),
  );
}
