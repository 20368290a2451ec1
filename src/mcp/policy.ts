import path from 'node:path';
import { z } from 'zod';
import { rolloutStateIsolated, SANDBOX_PLACEHOLDER, stateLocations, type IsolationOptions } from './sandbox.js';
import type { Target, ToolInfo } from './types.js';

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
   * change the server's real state (the user's data). Default false: writes run only where each rollout's state is
   * its own (rolloutStateIsolated in sandbox.ts).
   */
  allowUnisolatedWrites: z.boolean().default(false),
  /**
   * Who can act on a refusal, and so how its remedy is worded: `cli`, the user of a command (its options), or
   * `mcp`, a client of `mcprl mcp` (the tools' `target.isolate` / `target.sandbox_from` / `target.state_in_memory` arguments, and the options
   * the server's operator starts it with). Default `cli`.
   */
  remedyFor: z.enum(['cli', 'mcp']).default('cli'),
});
export type SafetyPolicyOptions = z.input<typeof SafetyPolicySchema>;
export type SafetyPolicySettings = z.output<typeof SafetyPolicySchema>;

/** Where a tool call would run. */
export interface CallSetting {
  /**
   * Each rollout's state is its own (rolloutStateIsolated: a fresh process on a `{sandbox}`, or on a target the user
   * declared in-memory), so tools that write may run. Default false.
   */
  isolated?: boolean;
  /** The target and how its rollouts are run, so that a refused write says exactly what to change. Default: generic advice. */
  target?: Target;
  isolation?: IsolationOptions;
}

/** The CallSetting of `target` run under `isolation`: isolated by the one rule, with what a refusal needs to say how. */
export function callSetting(target: Target, isolation: IsolationOptions = {}): CallSetting {
  return { isolated: rolloutStateIsolated(target, isolation), target, isolation };
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

/** How the operator spells each change: the command's options (cli), or the mcp tools' target arguments (mcp). */
const WORDS = {
  cli: {
    isolate: '--isolate',
    sandboxFrom: (dir: string) => `--sandbox-from ${dir}`,
    inMemory: '--state-in-memory',
    env: (name: string, value: string) => `${name}=${value}`,
    arg: (_i: number, was: string) => `${SANDBOX_PLACEHOLDER} in place of ${was}`,
    optOut: '--allow-unisolated-writes to let them change the real data',
  },
  mcp: {
    isolate: 'target.isolate: true',
    sandboxFrom: (dir: string) => `target.sandbox_from: ${dir}`,
    inMemory: 'target.state_in_memory: true',
    env: (name: string, value: string) => `target.env.${name}: "${value}"`,
    arg: (i: number, was: string) => `target.args[${i}]: "${SANDBOX_PLACEHOLDER}" in place of ${was}`,
    optOut: 'ask the operator to start mcprl mcp with --allow-unisolated-writes to let them change the real data',
  },
} as const;

/**
 * What makes refused writes run, for the operator, in one sentence: the `{sandbox}` change to the target first
 * (naming the env value or argument that holds its state when that can be seen), then the in-memory declaration,
 * then the opt-out that changes the real data.
 */
export function writeRemedy(remedyFor: RemedyFor = 'cli', target?: Target, isolation: IsolationOptions = {}): string {
  const w = WORDS[remedyFor];
  if (target?.kind === 'http') {
    return `mcprl cannot give an HTTP server's rollouts state of their own: run the server as a stdio command with ${SANDBOX_PLACEHOLDER} where it keeps its state and ${w.isolate}, or ${w.optOut}`;
  }
  if (target && isolateWouldDo(target, isolation)) {
    const why = isolation.stateInMemory ? 'the target is declared in-memory' : `each on its own ${SANDBOX_PLACEHOLDER}`;
    return `the rollouts share one server: run with ${w.isolate} (a fresh server per rollout, ${why}), or ${w.optOut}`;
  }
  const places = target ? stateLocations(target) : [];
  let change: string;
  if (places.length > 0) {
    const where = places.map((p) => (p.kind === 'env' ? w.env(p.name, p.path) : p.path)).join(', ');
    // A folder becomes the sandbox itself (seeded with a copy of it); a file, a file of that name in the sandbox.
    const edits = places.map((p) => {
      if (p.kind === 'env') return w.env(p.name, p.folder ? SANDBOX_PLACEHOLDER : `${SANDBOX_PLACEHOLDER}/${path.basename(p.path)}`);
      return w.arg(p.index, p.path);
    });
    const seed = places[0].folder
      ? w.sandboxFrom(places[0].path)
      : `${w.sandboxFrom('DIR')}, a folder holding a copy of ${path.basename(places[0].path)}`;
    change = `the target keeps its state in ${where}; run with ${w.isolate} and ${edits.join(' and ')} (seed it with ${seed})`;
  } else {
    change =
      `a fresh server per rollout still writes the real data unless its state lives in a ${SANDBOX_PLACEHOLDER}; run with ${w.isolate} and ` +
      `${SANDBOX_PLACEHOLDER} where the server keeps its state (its command, args, env or cwd; seed it with ${w.sandboxFrom('DIR')})`;
  }
  return `${change}, or declare ${w.inMemory} if the server keeps nothing on disk, or ${w.optOut}`;
}

/** True when `isolate` alone is missing: the target names a `{sandbox}`, or is declared in-memory. */
function isolateWouldDo(target: Target, isolation: IsolationOptions): boolean {
  return !isolation.isolate && rolloutStateIsolated(target, { ...isolation, isolate: true });
}

const sentence = (s: string) => `${s[0].toUpperCase()}${s.slice(1)}.`;

/**
 * The one line that says which write tools are refused and the change that makes them run, e.g.
 * `write tools refused (create_entities, add_observations): the target keeps its state in MEMORY_FILE_PATH=…; run
 * with --isolate and MEMORY_FILE_PATH={sandbox}/memory.json …`. Undefined when the policy refuses no write for
 * want of isolation.
 */
export function refusedWritesLine(tools: readonly ToolInfo[], policy: SafetyPolicy, where: CallSetting): string | undefined {
  const refused = tools.filter((t) => policy.refusesUnisolated(t, where));
  if (refused.length === 0) return undefined;
  // Those the isolation change alone would not let run say so, in the same line.
  const destructive = refused.filter((t) => !policy.check(t, { isolated: true }).allowed).map((t) => t.name);
  const also = destructive.length === 0 ? '' :
    `; ${destructive.join(', ')} also ${destructive.length === 1 ? 'needs' : 'need'} ${policy.remedyFor === 'mcp' ? "the operator's " : ''}--allow-destructive`;
  return `write tools refused (${refused.map((t) => t.name).join(', ')}${also}): ${writeRemedy(policy.remedyFor, where.target, where.isolation)}`;
}

/** The refusal of a write outside isolation: why, for the model; how to enable it, for the operator. */
export function unisolatedWriteRefusal(name: string, remedyFor: RemedyFor = 'cli', where: CallSetting = {}): { allowed: false; reason: string; remedy: string } {
  return {
    allowed: false,
    reason:
      `mcprl's safety policy refused tool '${name}': it may write (readOnlyHint is not true) and this server is not ` +
      `isolated, so the change would reach its real data. ${UNAVAILABLE}`,
    remedy: sentence(writeRemedy(remedyFor, where.target, where.isolation)),
  };
}

/** The one line that says why a write was refused outside isolation, and how to enable it (for the operator). */
export function unisolatedWriteReason(name: string, remedyFor: RemedyFor = 'cli', where: CallSetting = {}): string {
  const r = unisolatedWriteRefusal(name, remedyFor, where);
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
 * Independently of 2–5, a tool that is not read-only runs only where each rollout's state is its own (a fresh
 * process per rollout on a `{sandbox}`, or on a target the user declared in-memory), unless `allowUnisolatedWrites`:
 * training and evaluation must never change the user's data. A fresh process on the user's own file is not isolation.
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

  /** True when `tool` is refused for writing outside isolation (and not for being on the deny list). */
  refusesUnisolated(tool: ToolInfo, where: CallSetting = {}): boolean {
    return !this.deny.some((r) => r.test(tool.name)) && !tool.annotations.readOnlyHint && !where.isolated && !this.allowUnisolatedWrites;
  }

  /** Whether `tool` may run; `where.isolated` says each rollout's state is its own (see CallSetting). */
  check(tool: ToolInfo, where: CallSetting = {}): PolicyDecision {
    const { name, annotations: a } = tool;
    if (this.deny.some((r) => r.test(name))) {
      return { allowed: false, reason: `mcprl's safety policy refused tool '${name}': the operator denied it. ${UNAVAILABLE}`, remedy: this.remedyFor === 'mcp' ? 'The operator put it on the deny list of mcprl mcp (--deny).' : 'It is on the deny list (--deny).' };
    }
    if (this.refusesUnisolated(tool, where)) return unisolatedWriteRefusal(name, this.remedyFor, where);
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
