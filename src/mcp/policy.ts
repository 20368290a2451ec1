import type { ToolInfo } from './types.js';

export interface SafetyPolicyOptions {
  /** Let tools that may be destructive run. Default false. */
  allowDestructive?: boolean;
  /** Tool names (a `*` matches any run of characters) that always run, whatever their annotations say. */
  allow?: string[];
  /** Tool names (a `*` matches any run of characters) that never run. Deny wins over allow. */
  deny?: string[];
}

export type PolicyDecision = { allowed: true } | { allowed: false; reason: string };

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
 */
export class SafetyPolicy {
  readonly allowDestructive: boolean;
  private readonly allow: RegExp[];
  private readonly deny: RegExp[];
  readonly allowPatterns: readonly string[];
  readonly denyPatterns: readonly string[];

  constructor(options: SafetyPolicyOptions = {}) {
    this.allowDestructive = options.allowDestructive ?? false;
    this.allowPatterns = [...(options.allow ?? [])];
    this.denyPatterns = [...(options.deny ?? [])];
    this.allow = this.allowPatterns.map(globToRegExp);
    this.deny = this.denyPatterns.map(globToRegExp);
  }

  check(tool: ToolInfo): PolicyDecision {
    const { name, annotations: a } = tool;
    if (this.deny.some((r) => r.test(name))) {
      return { allowed: false, reason: `mcprl's safety policy refused tool '${name}': it is on the deny list (--deny).` };
    }
    if (this.allow.some((r) => r.test(name))) return { allowed: true };
    if (a.readOnlyHint) return { allowed: true };
    if (!a.destructiveHint) return { allowed: true };
    if (this.allowDestructive) return { allowed: true };
    return {
      allowed: false,
      reason:
        `mcprl's safety policy refused tool '${name}': it may be destructive (readOnlyHint is false and ` +
        `destructiveHint is ${tool.annotations.destructiveHint}, which is also the MCP default when a server ` +
        `says nothing), and destructive tools do not run by default. To allow it, rerun with ` +
        `--allow ${name} (this tool only) or --allow-destructive (every tool).`,
    };
  }
}
