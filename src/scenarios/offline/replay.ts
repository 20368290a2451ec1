/**
 * Replay: a read-only candidate's checked calls again, fresh, with every expected value in the real output again
 * (this also weeds out non-deterministic tools); and the scripted solver that replays a task that writes on
 * isolated servers of its own.
 */
import type { ToolCallOutcome } from '../../mcp/index.js';
import { validates } from '../json-schema-args.js';
import { answerContains } from '../scenario.js';
import type { Generation } from './generation.js';
import { disguisedError } from './output.js';
import { withPlaceholder } from './placeholder.js';
import type { StateReader } from './state-checks.js';
import type { Candidate, OfflineOptions } from './types.js';

/**
 * Every checked call of `c` again, fresh: their outputs when every call succeeds and shows every expected value,
 * else false. A candidate already replayed on isolated servers passes with no output.
 */
export async function replayChecks(g: Generation, c: Candidate): Promise<string | false> {
  if (c.verified) return '';
  let outputs = '';
  for (const check of c.checks) {
    if (check.kind !== 'tool_called') continue;
    const tool = g.byName.get(check.tool);
    if (!tool || !validates(tool.inputSchema, check.args)) return false;
    const out = await g.call(check.tool, check.args, true);
    if (out.isError) return false;
    outputs += out.text + '\n';
  }
  return c.checks.every((check) => check.kind !== 'answer_contains' || answerContains(outputs, check.value)) && outputs;
}


/** What a scripted solver's replay of writes showed: each call's result, and each reader's before and after. */
export interface IsolatedReplay {
  outputs: ToolCallOutcome[];
  /** The untouched state, read twice (what differs between two reads of it is no evidence of a change). */
  before: ToolCallOutcome[];
  again: ToolCallOutcome[];
  after: ToolCallOutcome[];
}

/**
 * The scripted solver for a task that writes: `calls` in order on a fresh isolated server of their own, then what
 * the readers show; the readers also on another fresh server, untouched. Both servers are closed at once. A call
 * that fails (or succeeds with an error in disguise) ends the replay: `{failed: tool}`.
 */
export async function replayOnIsolated(
  open: NonNullable<OfflineOptions['isolatedServer']>,
  calls: readonly { tool: string; args: Record<string, unknown> }[],
  readers: readonly StateReader[],
  timeoutMs: number,
): Promise<IsolatedReplay | { failed: string; detail: string }> {
  const before: ToolCallOutcome[] = [];
  const again: ToolCallOutcome[] = [];
  const untouched = withPlaceholder(await open());
  try {
    for (const r of readers) before.push(await untouched.callTool(r.tool, r.args, { timeoutMs }));
    for (const r of readers) again.push(await untouched.callTool(r.tool, r.args, { timeoutMs }));
  } finally {
    await untouched.close();
  }
  const outputs: ToolCallOutcome[] = [];
  const after: ToolCallOutcome[] = [];
  const box = withPlaceholder(await open());
  try {
    for (const c of calls) {
      const out = await box.callTool(c.tool, c.args, { timeoutMs });
      const disguised = out.isError ? undefined : disguisedError(out);
      if (out.isError || disguised) return { failed: c.tool, detail: disguised ?? out.text.slice(0, 200) };
      outputs.push(out);
    }
    for (const r of readers) after.push(await box.callTool(r.tool, r.args, { timeoutMs }));
  } finally {
    await box.close();
  }
  return { outputs, before, again, after };
}