import { z } from 'zod';
import type { ToolExecution } from '../mcp/index.js';
import { ChatMessageSchema } from '../chat/message.js';
import { OpenAIToolSchema } from '../chat/tool.js';

/**
 * A message as a trajectory keeps it: the chat message shape, without reasoning_content (trajectories never carry
 * it), and with an id on every tool call (the rollout loop and the recorder give each one; checks pair calls with
 * their answers by it).
 */
export const TrajectoryMessageSchema = ChatMessageSchema.omit({ reasoning_content: true }).superRefine((m, ctx) => {
  m.tool_calls?.forEach((c, i) => {
    if (c.id === undefined) ctx.addIssue({ code: 'custom', path: ['tool_calls', i, 'id'], message: 'Invalid input: expected string, received undefined' });
  });
});

export const TrajectoryMetricsSchema = z.object({
  /** Assistant turns taken (policy calls). */
  turns: z.number().int().nonnegative(),
  /** Tool calls the model emitted, valid or not, complete_task included. */
  tool_calls: z.number().int().nonnegative(),
  /** Valid calls that the server (or the safety policy, or a timeout) answered with an error. */
  tool_errors: z.number().int().nonnegative(),
  /** Calls that could not be executed: bad JSON, unknown tool, arguments failing the schema, unparseable. */
  invalid_calls: z.number().int().nonnegative(),
  /**
   * Calls sent to the server whose outcome is unknown (the connection was lost, the call timed out or was cancelled
   * while it ran): failures, counted apart. Absent (0) in trajectories recorded before it existed.
   */
  unknown_outcomes: z.number().int().nonnegative().optional(),
  /** The agent ended by itself: complete_task was called, or it answered without calling a tool. */
  completed: z.boolean(),
  ran_out_of_turns: z.boolean(),
  /** Wall time of the whole rollout in milliseconds. */
  latency_ms: z.number().nonnegative(),
  checks_passed: z.number().int().nonnegative().optional(),
  checks_total: z.number().int().nonnegative().optional(),
});

export const McpTrajectorySchema = z.object({
  id: z.string(),
  scenario_id: z.string(),
  /** Trajectories of one group share a goal and are judged together. */
  group_id: z.string().optional(),
  messages: z.array(TrajectoryMessageSchema),
  tools: z.array(OpenAIToolSchema),
  /** The complete_task summary, else the last assistant text, else null. */
  final_answer: z.string().nullable(),
  /** The reward used for training; see reward_components for its parts. */
  reward: z.number(),
  reward_components: z.object({ ruler: z.number().optional(), checks: z.number().optional() }),
  metrics: TrajectoryMetricsSchema,
  logs: z.array(z.string()),
  /** What the scenario's state checks read from the server after the rollout (one entry per state check). */
  state: z.array(z.object({ tool: z.string(), args: z.record(z.string(), z.unknown()), text: z.string(), is_error: z.boolean() })).optional(),
  /** The rollout server's `{sandbox}` directory, which the scenario's `{sandbox}` placeholders stood for. */
  sandbox: z.string().optional(),
  /**
   * The models that answered its assistant turns, as the endpoint named them (with rollout servers, the adapters'
   * names), each once, in the order first seen: more than one when the policy's adapter was replaced during the
   * rollout (asynchronous training, src/mcp-rl/train.ts). Absent when the policy names none (the in-process engine).
   */
  sampled_by: z.array(z.string()).optional(),
  /**
   * Set by training on rollout servers: the step of the oldest adapter among `sampled_by` (its staleness is the
   * trained adapter's step minus this).
   */
  policy_step: z.number().int().nonnegative().optional(),
  /** An infrastructure failure that ended the rollout early (policy unreachable, timeout, connection lost). */
  error: z.string().optional(),
  /**
   * Set when no reward could be computed (e.g. the judge failed for the whole group); `reward` is then 0 but
   * meaningless, and training must leave the trajectory out.
   */
  unscored: z.string().optional(),
});

export type McpTrajectory = z.infer<typeof McpTrajectorySchema>;
export type TrajectoryMetrics = z.infer<typeof TrajectoryMetricsSchema>;

/** Tool answers starting with these mark calls the loop did not execute (see wasExecuted). */
export const INVALID_CALL_PREFIX = 'Error: invalid tool call.';
export const NOT_EXECUTED_PREFIX = 'Not executed:';

/** Answers mcprl's session gave, in trajectories recorded before `execution`, to calls the server did not (knowingly) run. */
const UNRUN_ANSWER = /^Error: (Unknown tool '|Tool '[^']*' failed: the connection to the server was lost during the call)/;

/**
 * True when a tool message answers a call the server executed (or complete_task): its `execution` says so; a message
 * without one (recorded before it existed, or by an application's own loop) counts unless its text is one of the
 * loop's not-executed answers (its prefixes, an unknown tool, a connection lost during the call).
 */
export function wasExecuted(toolMessage: { content: string | null; execution?: ToolExecution }): boolean {
  if (toolMessage.execution !== undefined) return toolMessage.execution === 'executed';
  const c = toolMessage.content ?? '';
  return !c.startsWith(INVALID_CALL_PREFIX) && !c.startsWith(NOT_EXECUTED_PREFIX) && !UNRUN_ANSWER.test(c);
}
