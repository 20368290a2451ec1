/** The resources mcprl serves: each run's report, metrics and config, as mcprl://runs/{run}/{file}. */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { ResourceTemplate, type McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { McprlError } from '../../util/errors.js';
import type { McprlServerContext } from '../context.js';
import type { Workspace } from '../workspace.js';

const RUN_FILES = { 'report.html': 'text/html', 'metrics.jsonl': 'application/jsonl', 'config.json': 'application/json' } as const;


/**
 * A value with every absolute path in its strings (the model folder, the paths in a target's command line) shown as
 * results show paths: relative to the workspace or a model root, and outside them by name only.
 */
function withDisplayPaths(ws: Workspace, value: unknown): unknown {
  if (typeof value === 'string') return value.replace(/(?<![\w.:/~-])\/[^\s"'`,;]*/g, (p) => ws.display(p) || p);
  if (Array.isArray(value)) return value.map((v) => withDisplayPaths(ws, v));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withDisplayPaths(ws, v)]));
  return value;
}

export function registerRunFiles(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerResource(
    'run-file',
    new ResourceTemplate('mcprl://runs/{run}/{file}', {
      list: async () => {
        const resources = [];
        for (const run of await ctx.jobs.listRuns()) {
          for (const [file, mimeType] of Object.entries(RUN_FILES)) {
            if (existsSync(path.join(ws.runDir(run), file))) resources.push({ uri: `mcprl://runs/${run}/${file}`, name: `${run}/${file}`, mimeType });
          }
        }
        return { resources };
      },
      complete: {
        run: async (value) => (await ctx.jobs.listRuns()).filter((r) => r.startsWith(value)),
        file: (value) => Object.keys(RUN_FILES).filter((f) => f.startsWith(value)),
      },
    }),
    { title: 'Training run files', description: "A run's report.html, metrics.jsonl (one line per step) or config.json" },
    async (uri, vars) => {
      const run = String(vars.run);
      const file = String(vars.file);
      if (!(file in RUN_FILES)) throw new McprlError('WORKSPACE', `unknown run file ${JSON.stringify(file)}: one of ${Object.keys(RUN_FILES).join(', ')}`);
      const abs = ws.resolve(path.join(ws.runDir(run), file), 'resource');
      if (!existsSync(abs)) throw new McprlError('WORKSPACE', `run ${run} has no ${file} yet`);
      let text = await readFile(abs, 'utf8');
      if (file === 'config.json') text = JSON.stringify(withDisplayPaths(ws, JSON.parse(text)), null, 2);
      return { contents: [{ uri: uri.href, mimeType: RUN_FILES[file as keyof typeof RUN_FILES], text }] };
    },
  );
}
