import { COMPLETE_TASK } from '../agent/rollout.js';
import { wasExecuted, type McpTrajectory } from '../agent/trajectory.js';
import { numberValue } from '../scenarios/numbers.js';
import { answerContains, argsMatch, isStateCheck, normalizeAnswerText, scenarioInSandbox, stateShows, type Check, type Scenario } from '../scenarios/scenario.js';

export interface ChecksScore {
  passed: number;
  total: number;
  /** passed / total; 0 when the scenario has no checks (look at `total` before using it). */
  fraction: number;
  /**
   * The reward's share of the checks: the mean of each check's credit, 1 for a check passed and, for an answer check
   * failed, the part of its value the answer states (see answerCredit); never 1 unless every check passed, 0 when
   * the scenario has no checks. Success stays `passed === total`.
   */
  credit: number;
  /** One entry per check, in the scenario's order. */
  results: boolean[];
}

/** The calls a trajectory really made: name and parsed arguments, leaving out calls the loop rejected. */
export function executedCalls(traj: McpTrajectory): { name: string; args: Record<string, unknown> }[] {
  const answered = new Map<string, boolean>();
  for (const m of traj.messages) {
    if (m.role === 'tool' && m.tool_call_id !== undefined) answered.set(m.tool_call_id, wasExecuted(m));
  }
  const out: { name: string; args: Record<string, unknown> }[] = [];
  for (const m of traj.messages) {
    if (m.role !== 'assistant') continue;
    for (const c of m.tool_calls ?? []) {
      if (c.id !== undefined && answered.get(c.id) === false) continue;
      try {
        const args = c.function.arguments.trim() === '' ? {} : JSON.parse(c.function.arguments);
        if (args && typeof args === 'object' && !Array.isArray(args)) out.push({ name: c.function.name, args });
      } catch {
        // Unparseable arguments were never executed.
      }
    }
  }
  return out;
}

/**
 * The texts of the tool results a trajectory's server executed, complete_task's answer left out (it only echoes the
 * agent's summary).
 */
export function executedResults(traj: McpTrajectory): string[] {
  const names = new Map<string, string>();
  for (const m of traj.messages) for (const c of m.role === 'assistant' ? (m.tool_calls ?? []) : []) if (c.id !== undefined) names.set(c.id, c.function.name);
  return traj.messages.flatMap((m) => {
    if (m.role !== 'tool' || !wasExecuted(m)) return [];
    const name = m.name ?? (m.tool_call_id !== undefined ? names.get(m.tool_call_id) : undefined);
    return name === COMPLETE_TASK || m.content === null ? [] : [m.content];
  });
}

function checkPasses(check: Check, calls: ReturnType<typeof executedCalls>, traj: McpTrajectory, results: () => string[]): boolean {
  if (check.kind === 'tool_called') return calls.some((c) => c.name === check.tool && argsMatch(check.args, c.args));
  if (isStateCheck(check)) {
    return (traj.state ?? []).some((s) => s.tool === check.tool && argsMatch(check.args, s.args) && argsMatch(s.args, check.args) && stateShows(check, s));
  }
  if (check.kind === 'answer_value') {
    const answer = traj.final_answer;
    return answer !== null && answerContains(answer, check.value, check.tolerance) &&
      !(check.others ?? []).some((o) => answerContains(answer, o)) &&
      results().some((r) => answerContains(r, check.value, check.tolerance));
  }
  return traj.final_answer !== null && answerContains(traj.final_answer, check.value);
}

/** The words of normalised text: runs of letters and digits, joined by inner hyphens, dots or apostrophes ("bk-004", "12.99", "o'brien"). */
function wordsOf(normalized: string): string[] {
  return normalized.match(/[\p{L}\p{N}]+(?:[-.'’][\p{L}\p{N}]+)*/gu) ?? [];
}

/**
 * Credit, below 1, for an answer check that failed: the share of its value's words the final answer states, for a
 * value of two words or more that an executed tool result holds whole ("Watanabe" for "Kenji Watanabe" earns ½). A
 * name or title is copied word by word: without this, an answer one word short scores as a guess or "Done.", every
 * attempt of the group alike, and GRPO gets no signal towards stating the value. Words the task itself holds earn
 * nothing (copying the question finds nothing out), an answer that holds another entity's value (`others`) earns
 * nothing, and a number earns only when it matches as a number.
 */
function answerCredit(check: Extract<Check, { kind: 'answer_contains' | 'answer_value' }>, traj: McpTrajectory, task: string, results: () => string[]): number {
  const answer = traj.final_answer;
  const value = normalizeAnswerText(check.value);
  if (answer === null || numberValue(value) !== undefined) return 0;
  const words = wordsOf(value);
  if (words.length < 2 || !results().some((r) => answerContains(r, check.value))) return 0;
  if (check.kind === 'answer_value' && (check.others ?? []).some((o) => answerContains(answer, o))) return 0;
  const asked = new Set(wordsOf(normalizeAnswerText(task)));
  const stated = new Set(wordsOf(normalizeAnswerText(answer)));
  const found = words.filter((w) => !asked.has(w) && stated.has(w)).length;
  return Math.min(found, words.length - 1) / words.length;
}

/**
 * Scores a trajectory against its scenario's verifiable checks: a tool_called check passes when an executed
 * call has matching arguments (subset match); an answer_contains check when the final answer (the
 * complete_task summary or the last assistant text) contains the value; an answer_value check when the final answer
 * holds the value and none of its `others`, and the result of a call the server executed holds it, whichever tool
 * it was; a state check (state_contains,
 * state_absent, state_number) when what the rollout read from its server afterwards (`trajectory.state`) shows the
 * expected state (see stateShows). `{sandbox}` in the checks stands for the rollout's own sandbox directory. `credit`
 * adds the part of a multi-word value that a failed answer check's answer states (answerCredit): the reward's share.
 */
export function scoreChecks(traj: McpTrajectory, scenario: Scenario): ChecksScore {
  const checks = scenarioInSandbox(scenario, traj.sandbox).checks ?? [];
  const calls = executedCalls(traj);
  let texts: string[] | undefined;
  const toolResults = () => (texts ??= executedResults(traj));
  const results = checks.map((c) => checkPasses(c, calls, traj, toolResults));
  const credits = checks.map((c, i) =>
    results[i] ? 1 : c.kind === 'answer_contains' || c.kind === 'answer_value' ? answerCredit(c, traj, scenario.task, toolResults) : 0);
  const passed = results.filter(Boolean).length;
  const n = checks.length;
  return { passed, total: n, fraction: n > 0 ? passed / n : 0, credit: n > 0 ? credits.reduce((a, b) => a + b, 0) / n : 0, results };
}
