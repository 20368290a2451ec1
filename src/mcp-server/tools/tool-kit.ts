/** What every tool handler uses: its result shapes, and the guard that turns a throw into an isError result. */
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { redact, secretValues } from '../../mcp/index.js';

export type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** A tool result: the structured object, and the same as JSON text for clients that only show text. */
export function ok<T extends Record<string, unknown>>(structured: T, lead?: string): CallToolResult {
  const json = JSON.stringify(structured, null, 2);
  return { content: [{ type: 'text', text: lead ? `${lead}\n${json}` : json }], structuredContent: structured };
}

/** Tool failures come back as data; the message is one line, with nothing secret in it. */
function fail(err: unknown, secrets: readonly string[] = []): CallToolResult {
  const msg = redact((err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim(), secrets);
  const code = (err as { code?: unknown })?.code;
  return { content: [{ type: 'text', text: typeof code === 'string' && !msg.startsWith(code) ? `${code}: ${msg}` : msg }], isError: true };
}

/** The header and environment values a tool's `target` argument carries, whatever shape it has. */
function targetSecrets(args: unknown): string[] {
  const t = (args as { target?: unknown } | undefined)?.target as { headers?: unknown; env?: unknown } | undefined;
  const strings = (r: unknown) => (r && typeof r === 'object' ? Object.values(r).filter((v): v is string => typeof v === 'string') : []);
  return t && typeof t === 'object' ? secretValues([...strings(t.headers), ...strings(t.env)]) : [];
}

export function guarded<A>(fn: (args: A, extra: Extra) => Promise<CallToolResult>) {
  return async (args: A, extra: Extra): Promise<CallToolResult> => {
    try {
      return await fn(args, extra);
    } catch (err) {
      return fail(err, targetSecrets(args));
    }
  };
}

/** The default name of a folder a tool writes (scenario set, run, evaluation): the time, usable in a path. */
export const stamp = () => new Date().toISOString().replace(/[:.]/g, '-').replace(/Z$/, '');
