import { z } from 'zod';
import type { ToolInfo } from './types.js';

/** The operator's safety policy for a target's tools: the one contract behind the CLI flags, jobs and the MCP server. */
export const SafetyPolicySchema = z.object({
  /** Let tools that may be destructive run. Default false. */
  allowDestructive: z.boolean().default(false),
  /** Tool names (a `*` matches any run of characters) that always run, whatever their annotations say. Default none. */
  allow: z.array(z.string()).default([]),
  /** Tool names (a `*` matches any run of characters) that never run. Deny wins over allow. Default none. */
  deny: z.array(z.string()).default([]),
  /**
   * Let tools that write (not annotated readOnlyHint: true) run against a server that is not isolated, where they
   * change the server's real state (the user's data). Default false: writes run only in isolation (see sandbox.ts).
   */
  allowUnisolatedWrites: z.boolean().default(false),
  /**
   * Who can act on a refusal, and so how its remedy is worded: `cli`, the user of a command (its options), or
   * `mcp`, a client of `mcprl mcp` (the tools' `target.isolate` / `target.sandbox_from` arguments, and the options
   * the server's operator starts it with). Default `cli`.
   */
  remedyFor: z.enum(['cli', 'mcp']).default('cli'),
});
export type SafetyPolicyOptions = z.input<typeof SafetyPolicySchema>;
export type SafetyPolicySettings = z.output<typeof SafetyPolicySchema>;

/** Where a tool call would run: `isolated` when the server is a fresh process that one rollout alone uses. */
export interface CallSetting {
  isolated?: boolean;
}

/**
 * A refusal has two readers. `reason` goes to the model as the tool's error: what was refused and why, and that
 * it is not available here, never a command line, which the model can neither run nor change. `remedy` is for the
 * operator (the trajectory's logs, the command's messages): which options would let the tool run.
 */
export type PolicyDecision = { allowed: true } | { allowed: false; reason: string; remedy: string };

/** What the model reads after a refusal, besides why: the tool is out of its reach, so it must do without. */
const UNAVAILABLE = 'It is not available in this session: do the task with the other tools, or say what could not be done.';

type RemedyFor = SafetyPolicySettings['remedyFor'];

/** The refusal of a write outside isolation: why, for the model; how to enable it, for the operator. */
export function unisolatedWriteRefusal(name: string, remedyFor: RemedyFor = 'cli'): { allowed: false; reason: string; remedy: string } {
  return {
    allowed: false,
    reason:
      `mcprl's safety policy refused tool '${name}': it may write (readOnlyHint is not true) and this server is not ` +
      `isolated, so the change would reach its real data. ${UNAVAILABLE}`,
    remedy:
      remedyFor === 'mcp'
        ? `Call again with target.isolate: true (a fresh server per rollout; put {sandbox} in the target's command, args, env ` +
          `or cwd so its files live in a throwaway copy, seeded with target.sandbox_from), or ask the operator to start ` +
          `mcprl mcp with --allow-unisolated-writes to let it change the real data.`
        : `Rerun with --isolate (a fresh server per rollout; put {sandbox} in its command, args, env or cwd so its files ` +
          `live in a throwaway copy, seeded with --sandbox-from DIR), or with --allow-unisolated-writes to let it change the real data.`,
  };
}

/** The one line that says why a write was refused outside isolation, and how to enable it (for the operator). */
export function unisolatedWriteReason(name: string, remedyFor: RemedyFor = 'cli'): string {
  const r = unisolatedWriteRefusal(name, remedyFor);
  return `${r.reason} ${r.remedy}`;
}

function globToRegExp(pattern: string): RegExp {
  const escaped = pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*');
  return new RegExp(`^${escaped}$`);
}

/**
 * Decides which tools an agent may call. Annotations are hints from the server, not guarantees, so the user's
 * explicit lists come first:
 *
 * 1. a tool on the deny list never runs;
 * 2. a tool on the allow list always runs;
 * 3. a read-only tool (readOnlyHint true) runs;
 * 4. a tool that declares destructiveHint false runs: it changes state but only additively (placing an order,
 *    restocking), which is what training on a server's write tools needs;
 * 5. any other tool may be destructive (the spec's default is destructiveHint true) and runs only with
 *    `allowDestructive`.
 *
 * Independently of 2–5, a tool that is not read-only runs only where the server is isolated (a fresh process per
 * rollout, its files in a sandbox), unless `allowUnisolatedWrites`: training and evaluation must never change the
 * user's data.
 */
export class SafetyPolicy {
  readonly allowDestructive: boolean;
  private readonly allow: RegExp[];
  private readonly deny: RegExp[];
  readonly allowPatterns: readonly string[];
  readonly denyPatterns: readonly string[];
  readonly allowUnisolatedWrites: boolean;
  readonly remedyFor: RemedyFor;

  constructor(options: SafetyPolicyOptions = {}) {
    const o = SafetyPolicySchema.parse(options);
    this.allowDestructive = o.allowDestructive;
    this.allowUnisolatedWrites = o.allowUnisolatedWrites;
    this.remedyFor = o.remedyFor;
    this.allowPatterns = [...o.allow];
    this.denyPatterns = [...o.deny];
    this.allow = this.allowPatterns.map(globToRegExp);
    this.deny = this.denyPatterns.map(globToRegExp);
  }

  /** The settings this policy was made from (for a job file, or a worker process). */
  settings(): SafetyPolicySettings {
    return { allowDestructive: this.allowDestructive, allow: [...this.allowPatterns], deny: [...this.denyPatterns], allowUnisolatedWrites: this.allowUnisolatedWrites, remedyFor: this.remedyFor };
  }

  /** Whether `tool` may run; `where.isolated` says the server is a fresh one that a single rollout alone uses. */
  check(tool: ToolInfo, where: CallSetting = {}): PolicyDecision {
    const { name, annotations: a } = tool;
    if (this.deny.some((r) => r.test(name))) {
      return { allowed: false, reason: `mcprl's safety policy refused tool '${name}': the operator denied it. ${UNAVAILABLE}`, remedy: this.remedyFor === 'mcp' ? 'The operator put it on the deny list of mcprl mcp (--deny).' : 'It is on the deny list (--deny).' };
    }
    if (!a.readOnlyHint && !where.isolated && !this.allowUnisolatedWrites) return unisolatedWriteRefusal(name, this.remedyFor);
    if (this.allow.some((r) => r.test(name))) return { allowed: true };
    if (a.readOnlyHint) return { allowed: true };
    if (!a.destructiveHint) return { allowed: true };
    if (this.allowDestructive) return { allowed: true };
    return {
      allowed: false,
      reason:
        `mcprl's safety policy refused tool '${name}': it may be destructive (readOnlyHint is false and ` +
        `destructiveHint is ${tool.annotations.destructiveHint}, which is also the MCP default when a server ` +
        `says nothing), and destructive tools do not run by default. ${UNAVAILABLE}`,
      remedy:
        this.remedyFor === 'mcp'
          ? `The operator can allow it by starting mcprl mcp with --allow ${name} (this tool only) or --allow-destructive (every tool).`
          : `To allow it, rerun with --allow ${name} (this tool only) or --allow-destructive (every tool).`,
    };
  }
}
