/**
 * The coverage report of scenario generation: per tool, how many scenarios check a call of it and, for a tool with
 * none, why. `mcprl scenarios`, `mcprl train` and generate_scenarios report it as data (`--json` prints it as is);
 * what people read is rendered from that data by formatCoverage.
 */
import { z } from 'zod';

/** Why a tool has no scenario, from the earliest stage that stopped it to the latest. */
export const NoScenarioReasonSchema = z.enum([
  /** mcprl's safety policy refuses the tool (deny list, destructive, or a write outside isolation). */
  'refused_by_policy',
  /** The tool writes; writing tasks need isolation (--isolate) and a read-only tool that shows the change. */
  'writes_state',
  /** Its calls timed out, so it was not used again. */
  'timed_out',
  /** It was never picked before enough scenarios were made (or the attempts ran out). */
  'not_tried',
  /** No arguments could be built for it: a required value was never discovered and cannot be synthesized. */
  'no_discoverable_arguments',
  /** Every call failed, or came back as an error in disguise (an error message, an empty lookup). */
  'calls_failed',
  /** Its results held nothing a task could ask about and check. */
  'nothing_to_ask',
  /** Its candidates were near-duplicates of scenarios already made. */
  'only_duplicates',
  /** Replaying the candidate did not reproduce its expected values. */
  'replay_failed',
  /** LLM generation: no generated task checks a call of it. */
  'not_in_llm_tasks',
]);
export type NoScenarioReason = z.infer<typeof NoScenarioReasonSchema>;

/** What a reason means, for people. */
export const REASON_TEXT: Record<NoScenarioReason, string> = {
  refused_by_policy: 'refused by the safety policy',
  writes_state: 'writes state (no write task could be made)',
  timed_out: 'timed out',
  not_tried: 'not tried before the count was reached',
  no_discoverable_arguments: 'no discoverable arguments',
  calls_failed: 'every call failed (or was an error in disguise)',
  nothing_to_ask: 'results held nothing checkable',
  only_duplicates: 'only duplicates',
  replay_failed: 'replay failed',
  not_in_llm_tasks: 'no LLM task uses it',
};

/** Why an LLM task was dropped: its proposed solution, replayed against the server, did not show it feasible. */
export const InfeasibleReasonSchema = z.enum([
  /** The item came without a solution (tool calls and what the answer must contain). */
  'no_solution',
  /** A call names a tool the server does not have. */
  'unknown_tool',
  /** mcprl's safety policy refuses a tool the solution calls. */
  'refused_by_policy',
  /** A call's arguments do not fit the tool's input schema. */
  'invalid_arguments',
  /** The solution writes, and no isolated server was given to replay it on (--isolate). */
  'writes_need_isolation',
  /** A call failed, or came back as an error in disguise. */
  'call_failed',
  /** A value the answer must contain is not in what the calls returned. */
  'answer_not_in_output',
  /** The solution writes, but no read-only tool shows the change afterwards. */
  'no_state_change',
]);
export type InfeasibleReason = z.infer<typeof InfeasibleReasonSchema>;

/** LLM tasks dropped as infeasible, counted by reason (a reason absent: none dropped for it). */
export const InfeasibleCountsSchema = z.partialRecord(InfeasibleReasonSchema, z.number().int().positive());
export type InfeasibleCounts = z.infer<typeof InfeasibleCountsSchema>;

/** What an infeasibility reason means, for people. */
export const INFEASIBLE_TEXT: Record<InfeasibleReason, string> = {
  no_solution: 'no solution given',
  unknown_tool: 'unknown tool',
  refused_by_policy: 'refused by the safety policy',
  invalid_arguments: 'arguments do not fit the schema',
  writes_need_isolation: 'writes need --isolate',
  call_failed: 'a call failed',
  answer_not_in_output: 'answer not in the output',
  no_state_change: 'no state change shown',
};

/** "2 call failed, 1 unknown tool", or '' when none was dropped. */
export function formatInfeasible(counts: InfeasibleCounts): string {
  return Object.entries(counts).map(([r, n]) => `${n} ${INFEASIBLE_TEXT[r as InfeasibleReason]}`).join(', ');
}

export const ToolCoverageSchema = z.object({
  tool: z.string(),
  /** Scenarios with a check that this tool was called, or whose expected value generation read from it. */
  scenarios: z.number().int().nonnegative(),
  /** Scenarios whose check is on the server's state after a write by this tool. */
  stateChecked: z.number().int().nonnegative().default(0),
  /** Set when `scenarios` is 0. */
  reason: NoScenarioReasonSchema.optional(),
  /**
   * How many of the tool's candidates stopped at each stage, when `scenarios` is 0 and generation tried it: `reason`
   * is the commonest, so that one try in another task's shape (a make → use whose write it never shows) does not
   * hide why the tool's own tries stopped.
   */
  reasons: z.partialRecord(NoScenarioReasonSchema, z.number().int().positive()).optional(),
  /** More about the reason (the policy's refusal, the last error), when there is more to say. */
  detail: z.string().optional(),
});
export type ToolCoverage = z.infer<typeof ToolCoverageSchema>;

/**
 * The scenarios of a set, counted per tool they check a call of or read an expected value from (an answer_value's
 * `via`); a scenario may count for several tools.
 */
export function scenariosPerTool(scenarios: readonly { checks?: readonly { kind: string; tool?: string; via?: readonly { tool: string }[] }[] }[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of scenarios) {
    const tools = new Set((s.checks ?? []).flatMap((c) => (c.kind === 'tool_called' && c.tool ? [c.tool] : c.kind === 'answer_value' ? (c.via ?? []).map((v) => v.tool) : [])));
    for (const t of tools) out.set(t, (out.get(t) ?? 0) + 1);
  }
  return out;
}

/** Human-readable lines, one per tool: covered tools with their count, the others with why. */
export function formatCoverage(tools: readonly ToolCoverage[]): string[] {
  const width = Math.max(4, ...tools.map((t) => t.tool.length));
  const covered = tools.filter((t) => t.scenarios > 0).length;
  return [
    `tools covered  ${covered}/${tools.length}`,
    ...tools.map((t) => {
      const name = `  ${t.tool.padEnd(width)}  `;
      if (t.scenarios > 0) return `${name}${t.scenarios} scenario${t.scenarios === 1 ? '' : 's'}${t.stateChecked ? ` (${t.stateChecked} with a state check)` : ''}`;
      const why = t.reason ? REASON_TEXT[t.reason] : 'no scenario';
      return `${name}none: ${why}${t.detail ? ` (${t.detail})` : ''}`;
    }),
  ];
}
