/**
 * generate_scenarios: a scenario set for an MCP server, offline or by an LLM, written into the workspace; an offline
 * set may be reworded by an LLM (as `mcprl scenarios --offline --generator-model M`), its checks unchanged.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { isolatedServerOpener, refusedWrites } from '../../mcp/index.js';
import { writeScenarioSet } from '../../scenarios/scenario.js';
import { generateScenarioSet, ScenarioSummarySchema } from '../../scenarios/scenario-set.js';
import { formatCoverage } from '../../scenarios/coverage.js';
import { DEFAULT_GENERATOR_TIMEOUT_MS } from '../../scenarios/llm.js';
import { formatRephrasing } from '../../scenarios/rephrase.js';
import { McprlError } from '../../util/errors.js';
import type { McprlServerContext } from '../context.js';
import { Workspace } from '../workspace.js';
import { isolationFor, targetFromInput, TargetInput, withSession } from './target-input.js';
import { guarded, ok, stamp } from './tool-kit.js';

/**
 * The LLM that writes the tasks, or with `offline: true` rewords each offline task. Its key is resolved by the
 * server's API-key policy (api-keys.ts) in either use.
 */
export const GeneratorInput = z
  .object({
    model: z.string().describe('Writes the tasks; with offline: true, rewords each offline task (its checks unchanged; a rewording that drops or adds a value, names a tool or is long is refused and the task keeps its wording)'),
    base_url: z.string().optional().describe('OpenAI-compatible endpoint (default OpenAI, or $OPENAI_BASE_URL of the mcprl server)'),
    api_key_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).optional().describe("Environment variable of the mcprl server holding the key; it must be granted for base_url"),
    timeout_ms: z.number().int().positive().optional().describe(`Timeout of one request in milliseconds (default ${DEFAULT_GENERATOR_TIMEOUT_MS}; retried twice)`),
  })
  .describe('The LLM: required unless offline; with offline it rewords the offline tasks');

export function registerGenerateScenarios(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerTool(
    'generate_scenarios',
    {
      title: 'Generate training scenarios',
      description:
        'Write a scenario set (train.jsonl + val.jsonl) for an MCP server into the workspace (scenarios/<name>). offline: verifiable ' +
        'tasks from the tool schemas and read-only tools (no LLM); with a generator too, that LLM rewords each task, keeping its ' +
        'checks (summary.rephrasing says how many rewordings were kept and why the others were refused). Otherwise an ' +
        'OpenAI-compatible LLM writes them (generator.model). Either way its API key is read from the environment variable ' +
        'generator.api_key_env of the mcprl server, which the operator must have granted for that base_url; without ' +
        'api_key_env, OPENAI_API_KEY where granted (https://api.openai.com), else no key.',
      inputSchema: {
        target: TargetInput,
        count: z.number().int().min(2).max(500).default(24).describe('Scenarios in total (train + val)'),
        offline: z.boolean().default(false),
        generator: GeneratorInput.optional(),
        name: z.string().optional().describe('Folder name under scenarios/ (default a timestamp)'),
        seed: z.number().int().optional(),
      },
      outputSchema: {
        path: z.string(),
        train: z.number().int(),
        val: z.number().int(),
        summary: ScenarioSummarySchema.describe('What was made and dropped, and per tool of the server: scenarios made or why none'),
        refused_writes: z.string().optional().describe('When write tools got no task: which, and the change to the target that lets them run'),
      },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    guarded(async ({ target, count, offline, generator, name, seed }) => {
      const t = targetFromInput(ws, target, ctx.allowCommands);
      if (!offline && !generator) throw new McprlError('WORKSPACE', 'give offline: true, or generator: {model, base_url?, api_key_env?}');
      const key = generator ? ctx.keys.resolve(generator.api_key_env, generator.base_url, 'generator') : undefined;
      const dirName = Workspace.checkName(name ?? `set-${stamp()}`, 'scenario set name');
      const out = ws.resolve(path.join('scenarios', dirName), 'scenario set');
      if (existsSync(out)) throw new McprlError('WORKSPACE', `scenarios/${dirName} already exists; choose another name`);
      const isolation = isolationFor(ws, target, t);
      const isolatedServer = isolatedServerOpener(t, isolation, { policy: ctx.safety, timeoutMs: ctx.connectTimeoutMs });
      let refused: string | undefined;
      const set = await withSession(ctx, t, isolation, async (s) => {
        // The write tools that get no task, and the change to the target that would give them some: one line.
        refused = await refusedWrites(t, isolation, { policy: ctx.safety }, await s.listTools());
        return generateScenarioSet(s, {
          count,
          seed,
          offline,
          // Write tasks only where each replay's state is its own (a {sandbox}, or a target declared in-memory).
          ...(isolatedServer ? { isolatedServer } : {}),
          // 'no-key' rather than undefined: the OpenAI client would otherwise read OPENAI_API_KEY by itself.
          // With offline, the generator rewords the offline tasks (scenario-set.ts); without, it writes them.
          ...(generator && key ? { generator: { model: generator.model, baseURL: key.baseURL, apiKey: key.apiKey ?? 'no-key', timeoutMs: generator.timeout_ms } } : {}),
        });
      });
      if (set.train.length + set.val.length === 0) throw new Error('no scenarios could be generated for this server');
      await writeScenarioSet(out, set.train, set.val);
      const { rephrasing } = set.summary;
      return ok(
        { path: ws.display(out), train: set.train.length, val: set.val.length, summary: set.summary, ...(refused ? { refused_writes: refused } : {}) },
        [
          `wrote ${set.train.length} train and ${set.val.length} val scenarios to ${ws.display(out)}`,
          ...(rephrasing ? [`rephrased ${formatRephrasing(rephrasing)}`] : []),
          ...(refused ? [refused] : []),
          ...formatCoverage(set.summary.coverage),
        ].join('\n'),
      );
    }),
  );
}
