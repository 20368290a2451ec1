/**
 * `mcprl inspect <target>`: what an MCP server offers — a readable table, or the full catalog as JSON.
 */
import type { Command } from 'commander';
import { connect, type McpSession } from '../mcp/session.js';
import { McpConnectError, McpListError } from '../mcp/errors.js';
import { errorLine } from '../util/errors.js';
import { inspectSession, type InspectReport } from '../mcp/inspect.js';
import { callSetting, type PolicyDecision } from '../mcp/policy.js';
import type { ToolInfo } from '../mcp/types.js';
import { addTargetOptions, connectOptionsFromCli, isolationFromCli, targetFromCli, type TargetCliOptions } from './target-options.js';

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

/**
 * Renders the report as aligned text (tools table, then resources, templates and prompts). With `decide`, the
 * AGENT column says whether the safety policy lets an agent call each tool (`runs`) or not (`refused`).
 */
export function formatInspectTable(report: InspectReport, width = 120, decide?: (t: ToolInfo) => PolicyDecision): string {
  const { server, tools } = report;
  const out: string[] = [];
  out.push(`${server.name} ${server.version} (MCP protocol ${server.protocolVersion})`, '');
  out.push(`Tools (${tools.length}):`);
  const agent = (t: ToolInfo) => (decide ? [decide(t).allowed ? 'runs' : 'refused'] : []);
  const rows = tools.map((t) => [t.name, access(t), ...agent(t), requiredArgs(t), firstLine(t.description)]);
  const head = ['NAME', 'ACCESS', ...(decide ? ['AGENT'] : []), 'REQUIRED ARGS', 'DESCRIPTION'];
  const last = head.length - 1;
  const w = head.slice(0, last).map((_, i) => Math.max(head[i].length, ...rows.map((r) => r[i].length)));
  const descWidth = Math.max(20, width - (w.reduce((a, b) => a + b, 0) + 2 * last));
  const line = (r: string[]) => [...r.slice(0, last).map((c, i) => c.padEnd(w[i])), clip(r[last], descWidth)].join('  ').trimEnd();
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
  return errorLine(err);
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
      const connectOptions = connectOptionsFromCli(opts);
      session = await connect(target, connectOptions);
      const report = await inspectSession(session);
      // What an agent may call here: with --isolate (stdio only) every rollout would get its own server, and its
      // own state where the target names {sandbox} (or --state-in-memory).
      const where = callSetting(target, isolationFromCli(opts));
      const decide = (t: ToolInfo) => connectOptions.policy!.check(t, where);
      const policy = report.tools.map((t) => {
        const d = decide(t);
        return d.allowed ? { name: t.name, allowed: true } : { name: t.name, allowed: false, reason: d.reason, remedy: d.remedy };
      });
      process.stdout.write(
        opts.json ? `${JSON.stringify({ ...report, policy }, null, 2)}\n` : `${formatInspectTable(report, process.stdout.columns || 120, decide)}\n`,
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
