/**
 * Targets from an MCP client config file in the common `mcpServers` shape (Claude Desktop, Cursor, VS Code):
 *
 *   { "mcpServers": { "bookshop": { "command": "node", "args": ["server.js"], "env": {"K": "v"}, "cwd": "." },
 *                     "remote":   { "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"} } } }
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { McpConnectError } from './errors.js';
import type { Target } from './types.js';

export const StdioServerEntrySchema = z.object({
  type: z.literal('stdio').optional(),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).optional(),
  /** Relative paths are resolved against the config file's folder. */
  cwd: z.string().optional(),
});

export const HttpServerEntrySchema = z.object({
  /** Informational: the transport is chosen by trying streamable HTTP first and falling back to SSE. */
  type: z.enum(['http', 'streamable-http', 'streamableHttp', 'sse']).optional(),
  url: z.string().regex(/^https?:\/\//, 'must be an http(s) URL'),
  headers: z.record(z.string(), z.string()).optional(),
});

export const McpConfigFileSchema = z.object({
  mcpServers: z.record(z.string(), z.union([StdioServerEntrySchema, HttpServerEntrySchema])),
});
export type McpConfigFile = z.infer<typeof McpConfigFileSchema>;

/** A short description of a target for files and logs: the command or the URL, never header or environment values. */
export function describeTarget(t: Target): string {
  return t.kind === 'stdio' ? [t.command, ...t.args].join(' ') : t.url;
}

/** Reads `file` and returns the target named `server` (or the only one, when the file has exactly one). */
export function targetFromConfigFile(file: string, server?: string): Target {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new McpConnectError('CONFIG', `cannot read config file ${file}: ${(err as Error).message}`, { cause: err });
  }
  return targetFromConfig(raw, file, server);
}

/**
 * The target named `server` (or the only one) of a config in the mcpServers shape that came from `file` (relative
 * cwd values are resolved against its folder; for a config that is no file, pass a path in the folder to use).
 */
export function targetFromConfig(raw: unknown, file: string, server?: string): Target {
  const parsed = McpConfigFileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new McpConnectError('CONFIG', `config file ${file} is not in the mcpServers shape: ${issue.path.join('.')}: ${issue.message}`);
  }
  const names = Object.keys(parsed.data.mcpServers);
  let name = server;
  if (name === undefined) {
    if (names.length !== 1) {
      throw new McpConnectError('CONFIG', `config file ${file} has ${names.length} servers; choose one with --server (${names.join(', ')})`);
    }
    name = names[0];
  }
  const entry = parsed.data.mcpServers[name];
  if (!entry) throw new McpConnectError('CONFIG', `no server named '${name}' in ${file} (it has: ${names.join(', ') || 'none'})`);
  if ('command' in entry) {
    const target: Target = { kind: 'stdio', command: entry.command, args: entry.args };
    if (entry.env) target.env = entry.env;
    if (entry.cwd) target.cwd = path.resolve(path.dirname(path.resolve(file)), entry.cwd);
    return target;
  }
  const target: Target = { kind: 'http', url: entry.url };
  if (entry.headers) target.headers = entry.headers;
  return target;
}
