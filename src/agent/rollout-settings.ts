/**
 * The settings of rollouts, written once: what each one means, its unit and bounds (RolloutSettingsSchema), and
 * every command's default beside it. `mcprl train` and the start_training tool (src/train/config.ts), `mcprl eval`
 * (src/cli/eval.ts) and the rollout loop (src/agent/rollout.ts), and the MCP tools evaluate and run_agent
 * (src/mcp-server/tools/) derive their fields from this schema and take their defaults from the sets below.
 *
 * The commands' defaults differ on purpose, and each set says why: training keeps rollouts short and sampled,
 * evaluation gives an endpoint's model more turns and leaves tokens and temperature to the endpoint, and the MCP
 * tools answer greedily with the run's own limits.
 */
import { z } from 'zod';

/** One rollout's limits and sampling, and how many rollouts run at once. No defaults here: see the sets below. */
export const RolloutSettingsSchema = z.object({
  /** Assistant turns per rollout, at most. */
  maxTurns: z.number().int().positive().describe('assistant turns per rollout'),
  /** Tokens per assistant turn, at most. */
  maxTokens: z.number().int().positive().describe('tokens per assistant turn'),
  /** Sampling temperature; 0 is greedy. */
  temperature: z.number().nonnegative().describe('sampling temperature'),
  /** Rollouts in flight at once. */
  concurrency: z.number().int().positive().describe('rollouts in flight at once'),
});
export type RolloutSettings = z.infer<typeof RolloutSettingsSchema>;

/**
 * A field of RolloutSettingsSchema with a command's default, keeping the field's description: zod's default()
 * wraps the field in a schema with no description of its own, and help texts read the outermost one.
 */
export function withDefault(field: z.ZodNumber, value: number): z.ZodDefault<z.ZodNumber> {
  return field.default(value).describe(field.description ?? '');
}

/**
 * `mcprl train` and start_training: short, sampled rollouts (temperature 1, so that a group's attempts differ), and
 * greedy validation, so that validation success is a property of the weights.
 */
export const TRAIN_ROLLOUT_DEFAULTS = { maxTurns: 6, maxTokens: 256, temperature: 1, valTemperature: 0, concurrency: 8 } as const;

/**
 * `mcprl eval`, and the rollout loop when its caller gives no maxTurns: more turns than training's, since the model
 * behind an endpoint may be a larger one. Tokens per turn and temperature are the endpoint's own unless given.
 */
export const EVAL_ROLLOUT_DEFAULTS = { maxTurns: 10, concurrency: 4 } as const;

/**
 * The MCP tools evaluate and run_agent: an agent from a run takes that run's maxTurns and maxTokens, a bare model
 * training's (the limits it would be trained with); greedy, and few rollouts at once, since the tools share a
 * server's one engine.
 */
export const AGENT_TOOL_ROLLOUT_DEFAULTS = {
  maxTurns: TRAIN_ROLLOUT_DEFAULTS.maxTurns,
  maxTokens: TRAIN_ROLLOUT_DEFAULTS.maxTokens,
  temperature: 0,
  concurrency: 2,
} as const;
