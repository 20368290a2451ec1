/** export_adapter: a run's adapter as a PEFT folder, a merged model or ONNX, under exports/. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { exportModel } from '../../export/export-model.js';
import { RunDir } from '../../train/run-dir.js';
import { McprlError } from '../../util/errors.js';
import { resolveAgent } from '../agent.js';
import type { McprlServerContext } from '../context.js';
import { Workspace } from '../workspace.js';
import { guarded, ok } from './tool-kit.js';

export function registerExportAdapter(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerTool(
    'export_adapter',
    {
      title: 'Export a trained adapter',
      description:
        "Export a run's adapter: peft (a PEFT LoRA folder vLLM and Hugging Face load), merged (a Hugging Face model with the " +
        'adapter merged in) or onnx (the forward pass). Writes exports/<name> (default <run>-<format>); an existing folder is refused.',
      inputSchema: {
        run: z.string(),
        format: z.enum(['peft', 'merged', 'onnx']).default('peft'),
        checkpoint: z.enum(['best', 'latest']).default('best'),
        name: z.string().optional().describe('Folder name under exports/'),
      },
      outputSchema: { path: z.string(), format: z.enum(['peft', 'merged', 'onnx']), detail: z.string(), step: z.number().int() },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
    },
    guarded(async ({ run, format, checkpoint, name }) => {
      const agent = await resolveAgent(ws, { run, checkpoint });
      if (!agent.adapterDir) {
        throw new McprlError('WORKSPACE', `run ${run}: no trained step beat the untrained model, so there is no best adapter; pass checkpoint: 'latest' to export the last step's`);
      }
      const state = await new RunDir(ws.runDir(run)).readState();
      const step = checkpoint === 'best' ? state!.bestStep : state!.step;
      const outName = Workspace.checkName(name ?? `${run}-${format}${checkpoint === 'latest' ? '-latest' : ''}`, 'export name');
      const out = ws.resolve(path.join('exports', outName), 'export folder');
      if (existsSync(out)) throw new McprlError('WORKSPACE', `exports/${outName} already exists; choose another name`);
      const summary = await exportModel({ modelDir: agent.modelDir, adapterDir: agent.adapterDir, format, out });
      return ok({ path: ws.display(out), format, detail: summary.detail, step }, `${ws.display(out)}: ${summary.detail}`);
    }),
  );
}
