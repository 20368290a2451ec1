/**
 * The `target` argument of the tools: its schema, and how it becomes a Target, its Isolation and a session. Paths in
 * it must lie in the workspace; a stdio target runs only where the operator allows commands.
 */
import { z } from 'zod';
import {
  checkSandboxFrom,
  connect,
  IsolationSchema,
  type Isolation,
  type McpSession,
  type Target,
} from '../../mcp/index.js';
import { McprlError } from '../../util/errors.js';
import type { McprlServerContext } from '../context.js';
import type { Workspace } from '../workspace.js';

export const TargetInput = z
  .object({
    url: z.string().optional().describe('Streamable HTTP (or SSE) endpoint of the MCP server, http(s)://…'),
    headers: z.record(z.string(), z.string()).optional().describe('HTTP headers for url, e.g. Authorization (used, never echoed)'),
    command: z.string().optional().describe('Command that starts a stdio MCP server, e.g. "npx"'),
    args: z.array(z.string()).optional().describe('Arguments of command'),
    env: z.record(z.string(), z.string()).optional().describe('Extra environment for command (used, never echoed)'),
    cwd: z.string().optional().describe('Working directory for command, inside the workspace (default: the mcprl server\'s)'),
    isolate: z.boolean().optional().describe('A fresh server per rollout, each with its own {sandbox} directory; tools that write run only then, and only when the target keeps its state in {sandbox} (or state_in_memory) (default false)'),
    sandbox_from: z.string().optional().describe('A folder in the workspace copied into every {sandbox} (write {sandbox} in args, env or cwd); the folder itself is never written'),
    // The library's own field (IsolationSchema.stateInMemory), optional here as every target argument is.
    state_in_memory: IsolationSchema.shape.stateInMemory.unwrap().optional().describe(
      'The server keeps its state in memory only (nothing on disk): with isolate, its tools that write run without a {sandbox} (default false)',
    ),
  })
  .describe('The MCP server to work on: either {url, headers?} or {command, args?, env?, cwd?}');
export type TargetInputT = z.infer<typeof TargetInput>;

/**
 * Turns the tool argument into a Target; a stdio cwd must lie in the workspace, and a stdio target at all only
 * where the operator allows commands.
 */
export function targetFromInput(ws: Workspace, t: TargetInputT, allowCommands: boolean): Target {
  if ((t.url === undefined) === (t.command === undefined)) throw new McprlError('WORKSPACE', 'target needs exactly one of url or command');
  if (t.url !== undefined) {
    if (t.command !== undefined || t.args || t.env || t.cwd) throw new McprlError('WORKSPACE', 'an url target takes only headers besides url');
    let u: URL;
    try {
      u = new URL(t.url);
    } catch {
      throw new McprlError('WORKSPACE', `target.url is not a valid URL: ${JSON.stringify(t.url)}`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new McprlError('WORKSPACE', 'target.url must be http(s)://');
    return { kind: 'http', url: t.url, ...(t.headers ? { headers: t.headers } : {}) };
  }
  if (t.headers) throw new McprlError('WORKSPACE', 'headers apply to url targets only');
  if (!allowCommands) {
    throw new McprlError('WORKSPACE', 'this mcprl server does not run commands for its clients (it serves HTTP): give target.url, or ask the operator to start it with --allow-commands');
  }
  const target: Target = { kind: 'stdio', command: t.command!, args: t.args ?? [] };
  if (t.env) target.env = t.env;
  if (t.cwd !== undefined) target.cwd = ws.resolve(t.cwd, 'target.cwd');
  return target;
}

/** Isolation from the target argument; sandbox_from must lie in the workspace. */
export function isolationFromInput(ws: Workspace, t: TargetInputT): Isolation {
  return IsolationSchema.parse({
    isolate: t.isolate, stateInMemory: t.state_in_memory,
    ...(t.sandbox_from !== undefined ? { sandboxFrom: ws.resolve(t.sandbox_from, 'target.sandbox_from') } : {}),
  });
}

/** Isolation from the target argument, for `target` (as targetFromInput made it): sandbox_from needs a {sandbox}. */
export function isolationFor(ws: Workspace, input: TargetInputT, target: Target): Isolation {
  const isolation = isolationFromInput(ws, input);
  checkSandboxFrom(target, isolation.sandboxFrom, 'target.sandbox_from');
  return isolation;
}

/** A session for one piece of work; `isolated` when that work is a single rollout with a server of its own. */
export async function withSession<T>(ctx: McprlServerContext, target: Target, isolation: Isolation, fn: (s: McpSession) => Promise<T>, isolated = false): Promise<T> {
  checkSandboxFrom(target, isolation.sandboxFrom, 'target.sandbox_from');
  const session = await connect(target, {
    policy: ctx.safety, timeoutMs: ctx.connectTimeoutMs, sandboxFrom: isolation.sandboxFrom, stateInMemory: isolation.stateInMemory, isolated: isolated && isolation.isolate,
  });
  try {
    return await fn(session);
  } finally {
    await session.close();
  }
}
