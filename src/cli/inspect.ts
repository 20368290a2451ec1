/**
 * `mcprl inspect <target>`: what an MCP server offers — a readable table, or the full catalog as JSON.
 */
import type { Command } from 'commander';
import { connect, type McpSession } from '../mcp/session.js';
import { McpConnectError, McpListError } from '../mcp/errors.js';
import { inspectSession, type InspectReport } from '../mcp/inspect.js';
import type { ToolInfo } from '../mcp/types.js';
import { addTargetOptions, connectOptionsFromCli, targetFromCli, type TargetCliOptions } from './target-options.js';

function access(t: ToolInfo): string {
  if (t.annotations.readOnlyHint) return 'read-only';
  return t.annotations.destructiveHint ? 'destructive' : 'write';
}

function requiredArgs(t: ToolInfo): string {
  const req = t.inputSchema.required;
  return Array.isArray(req) && req.length ? req.join(', ') : '-';
}

function firstLine(s: string): string {
  return s.split('\n').map((l) => l.trim()).find(Boolean) ?? '';
}

function clip(s: string, width: number): string {
  if (width <= 1) return '';
  return s.length <= width ? s : `${s.slice(0, width - 1)}…`;
}

/** Renders the report as aligned text (tools table, then resources, templates and prompts). */
export function formatInspectTable(report: InspectReport, width = 120): string {
  const { server, tools } = report;
  const out: string[] = [];
  out.push(`${server.name} ${server.version} (MCP protocol ${server.protocolVersion})`, '');
  out.push(`Tools (${tools.length}):`);
  const rows = tools.map((t) => [t.name, access(t), requiredArgs(t), firstLine(t.description)]);
  const head = ['NAME', 'ACCESS', 'REQUIRED ARGS', 'DESCRIPTION'];
  const w = [0, 1, 2].map((i) => Math.max(head[i].length, ...rows.map((r) => r[i].length)));
  const descWidth = Math.max(20, width - (w[0] + w[1] + w[2] + 6));
  const line = (r: string[]) =>
    `${r[0].padEnd(w[0])}  ${r[1].padEnd(w[1])}  ${r[2].padEnd(w[2])}  ${clip(r[3], descWidth)}`.trimEnd();
  if (rows.length) {
    out.push(line(head));
    for (const r of rows) out.push(line(r));
  }
  out.push('');
  out.push(`Resources (${report.resources.length}):`);
  for (const r of report.resources) out.push(`  ${r.uri}${r.name ? `  ${r.name}` : ''}${r.mimeType ? `  (${r.mimeType})` : ''}`);
  out.push(`Resource templates (${report.resourceTemplates.length}):`);
  for (const r of report.resourceTemplates) out.push(`  ${r.uriTemplate}${r.name ? `  ${r.name}` : ''}`);
  out.push(`Prompts (${report.prompts.length}):`);
  for (const p of report.prompts) {
    const args = (p.arguments ?? []).map((a) => (a.required ? a.name : `${a.name}?`)).join(', ');
    out.push(`  ${p.name}(${args})${p.description ? `  ${clip(firstLine(p.description), width - p.name.length - args.length - 6)}` : ''}`);
  }
  return out.join('\n');
}

/** One line for stderr, whatever the error. */
export function oneLineError(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  return msg.replace(/\s+/g, ' ').trim();
}

export function registerInspect(program: Command): Command {
  const cmd = program
    .command('inspect')
    .description("show an MCP server's tools, resources, resource templates and prompts")
    .argument('[target...]', 'an http(s) URL, or the server command after --')
    .option('--json', 'print the full catalog as JSON');
  addTargetOptions(cmd);
  cmd.addHelpText(
    'after',
    `
Examples:
  mcprl inspect -- npx @modelcontextprotocol/server-everything
  mcprl inspect --json http://127.0.0.1:3001/mcp --header 'Authorization: Bearer TOKEN'
  mcprl inspect --config mcp.json --server bookshop`,
  );
  cmd.action(async (targetArgs: string[], opts: TargetCliOptions & { json?: boolean }) => {
    let session: McpSession | undefined;
    try {
      const target = targetFromCli(targetArgs, opts);
      session = await connect(target, connectOptionsFromCli(opts));
      const report = await inspectSession(session);
      process.stdout.write(
        opts.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatInspectTable(report, process.stdout.columns || 120)}\n`,
      );
    } catch (err) {
      const kind = err instanceof McpConnectError || err instanceof McpListError ? `${err.code}: ` : '';
      process.stderr.write(`mcprl inspect: ${kind}${oneLineError(err)}\n`);
      process.exitCode = 1;
    } finally {
      await session?.close();
    }
  });
  return cmd;
}
