/** stop_training: ends a run's training process; its complete steps stay. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { McprlServerContext } from '../context.js';
import { Workspace } from '../workspace.js';
import { RunStatusOutput } from './run-status.js';
import { guarded, ok } from './tool-kit.js';

export function registerStopTraining(server: McpServer, ctx: McprlServerContext): void {
  server.registerTool(
    'stop_training',
    {
      title: 'Stop training',
      description:
        "End a run's training process (SIGTERM, then SIGKILL after a grace period). The step in flight is lost; complete " +
        'steps stay, and `mcprl train --resume` can continue the run. Stopping a run that is not running changes nothing.',
      inputSchema: { run: z.string() },
      outputSchema: { run: z.string(), was_running: z.boolean(), signal: z.enum(['SIGTERM', 'SIGKILL']).nullable(), status: z.object(RunStatusOutput) },
      // It ends a process and discards the step in flight; stopping twice is the same as once.
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    guarded(async ({ run }) => {
      Workspace.checkRunName(run);
      const r = await ctx.jobs.stop(run);
      const status = await ctx.jobs.status(run);
      return ok(
        { run, was_running: r.was_running, signal: r.signal, status: status as unknown as Record<string, unknown> },
        r.was_running ? `stopped run ${run} (${r.signal})` : `run ${run} was not running`,
      );
    }),
  );
}
