/** list_runs: the workspace's training runs with their status. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { McprlServerContext } from '../context.js';
import { RunStatusOutput, statusLine } from './run-status.js';
import { guarded, ok } from './tool-kit.js';

export function registerListRuns(server: McpServer, ctx: McprlServerContext): void {
  server.registerTool(
    'list_runs',
    {
      title: 'List training runs',
      description: 'The training runs in the workspace, with their status.',
      inputSchema: {},
      outputSchema: { runs: z.array(z.object(RunStatusOutput)) },
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    },
    guarded(async () => {
      const runs = [];
      for (const name of await ctx.jobs.listRuns()) runs.push(await ctx.jobs.status(name));
      return ok({ runs: runs as unknown as Record<string, unknown>[] }, runs.map(statusLine).join('\n') || 'no runs in the workspace');
    }),
  );
}
