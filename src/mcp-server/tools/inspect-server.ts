/** inspect_server: an MCP server's catalog, with what mcprl's safety policy lets run. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { callSetting, inspectSession } from '../../mcp/index.js';
import type { McprlServerContext } from '../context.js';
import { isolationFromInput, targetFromInput, TargetInput, withSession } from './target-input.js';
import { guarded, ok } from './tool-kit.js';

const ToolSummary = z.object({
  name: z.string(),
  access: z.enum(['read-only', 'write', 'destructive']),
  allowed: z.boolean(),
  remedy: z.string().optional().describe('When not allowed: what would let it run (a target argument, or an option of this server)'),
  description: z.string(),
});

export function registerInspectServer(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerTool(
    'inspect_server',
    {
      title: 'Inspect an MCP server',
      description: "List an MCP server's tools (with access level and whether mcprl's safety policy lets them run), resources, resource templates and prompts — the catalog `mcprl inspect --json` prints.",
      inputSchema: { target: TargetInput },
      outputSchema: {
        server: z.object({ name: z.string(), version: z.string(), protocolVersion: z.string() }),
        tools: z.array(ToolSummary),
        catalog: z.record(z.string(), z.unknown()).describe('The full catalog, as `mcprl inspect --json`'),
      },
      // Listing changes nothing on the target or in the workspace; it does talk to an outside server.
      annotations: { readOnlyHint: true, openWorldHint: true },
    },
    guarded(async ({ target }) => {
      const t = targetFromInput(ws, target, ctx.allowCommands);
      const isolation = isolationFromInput(ws, target);
      const report = await withSession(ctx, t, isolation, (s) => inspectSession(s));
      const tools = report.tools.map((tool) => {
        const decision = ctx.safety.check(tool, callSetting(t, isolation));
        return {
          name: tool.name,
          access: tool.annotations.readOnlyHint ? ('read-only' as const) : tool.annotations.destructiveHint ? ('destructive' as const) : ('write' as const),
          allowed: decision.allowed,
          ...(decision.allowed ? {} : { remedy: decision.remedy }),
          description: tool.description.split('\n')[0] ?? '',
        };
      });
      return ok(
        { server: report.server, tools, catalog: report as unknown as Record<string, unknown> },
        `${report.server.name} ${report.server.version}: ${tools.length} tools, ${report.resources.length} resources, ${report.prompts.length} prompts`,
      );
    }),
  );
}
