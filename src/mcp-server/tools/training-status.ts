/** training_status: a run's status, optionally waiting for its next step with progress notifications. */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { McprlServerContext } from '../context.js';
import { progressValue, type RunStatus } from '../training-jobs.js';
import { Workspace } from '../workspace.js';
import { RunStatusOutput, statusLine } from './run-status.js';
import { guarded, ok } from './tool-kit.js';

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

export function registerTrainingStatus(server: McpServer, ctx: McprlServerContext): void {
  server.registerTool(
    'training_status',
    {
      title: 'Training status',
      description:
        'Step, phase, latest metrics and best validation success of a run, read from its run directory (any client can ' +
        'watch any run). wait: true returns when the next step completes or the run ends (or after timeout_s), sending ' +
        'progress notifications meanwhile when the request carries a progress token.',
      inputSchema: {
        run: z.string(),
        wait: z.boolean().default(false),
        timeout_s: z.number().positive().max(3600).default(50).describe('With wait: give up after this many seconds (default 50)'),
      },
      outputSchema: RunStatusOutput,
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    },
    guarded(async ({ run, wait, timeout_s }, extra) => {
      Workspace.checkRunName(run);
      let status = await ctx.jobs.status(run);
      const token = extra._meta?.progressToken;
      let lastProgress = -1;
      const notify = async (s: RunStatus) => {
        if (token === undefined) return;
        const value = progressValue(s);
        if (value <= lastProgress) return;
        lastProgress = value;
        await extra
          .sendNotification({
            method: 'notifications/progress',
            params: { progressToken: token, progress: value, ...(s.max_steps ? { total: s.max_steps } : {}), message: statusLine(s) },
          })
          .catch(() => undefined);
      };
      if (wait) {
        const startStep = status.step;
        const until = Date.now() + timeout_s * 1000;
        await notify(status);
        while ((status.status === 'running' || status.status === 'starting') && status.step === startStep && Date.now() < until && !extra.signal.aborted) {
          await sleep(Math.min(1000, Math.max(0, until - Date.now())), extra.signal);
          status = await ctx.jobs.status(run);
          await notify(status);
        }
      }
      return ok(status as unknown as Record<string, unknown>, statusLine(status));
    }),
  );
}
