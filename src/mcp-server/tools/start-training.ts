/** start_training: a training run in the background, checked (scenarios, target, device) before it starts. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { describeTarget } from '../../mcp/index.js';
import { loadScenarioSet } from '../../scenarios/scenario.js';
import { chooseDevice } from '../../engine/device.js';
import { trainConfigFrom, TrainSettingsSchema } from '../../train/config.js';
import { checkHeldOut } from '../../mcp-rl/job.js';
import { SUPPORTED_MODEL_TYPES } from '../../hf/config.js';
import { McprlError } from '../../util/errors.js';
import type { McprlServerContext } from '../context.js';
import { settingsFromInput, TrainOptionsInput } from '../train-input.js';
import { JUDGE_KEY_ENV } from '../training-jobs.js';
import { Workspace } from '../workspace.js';
import { isolationFor, isolationFromInput, targetFromInput, TargetInput, withSession } from './target-input.js';
import { guarded, ok, stamp } from './tool-kit.js';

export function registerStartTraining(server: McpServer, ctx: McprlServerContext): void {
  const ws = ctx.workspace;
  server.registerTool(
    'start_training',
    {
      title: 'Start training (background)',
      description:
        'Start a training run (GRPO on a LoRA adapter, as `mcprl train`) in the background and return the run name at once. Watch it with ' +
        'training_status (wait: true streams progress), end it with stop_training. The run directory is <workspace>/<run>.',
      inputSchema: {
        target: TargetInput,
        model: z.string().describe(`Hugging Face model folder (${SUPPORTED_MODEL_TYPES.join(', ')}) in the workspace or a --models root`),
        run: z.string().optional().describe('Run name (default a timestamp)'),
        scenarios: z.string().optional().describe('Scenario set folder in the workspace (train.jsonl + val.jsonl)'),
        offline: z.boolean().optional().describe('Without scenarios: generate verifiable ones from the schemas'),
        count: z.number().int().min(2).optional().describe('With offline: scenarios to generate (default 24)'),
        options: TrainOptionsInput.optional().describe('Training settings, each optional with the default `mcprl train --help` shows; the same schema as `mcprl train` options, in snake_case'),
        reward: TrainSettingsSchema.shape.reward,
        judge: z
          .object({
            base_url: z.string().regex(/^https?:\/\//),
            model: z.string().min(1),
            api_key_env: z
              .string()
              .regex(/^[A-Za-z_][A-Za-z0-9_]*$/)
              .optional()
              .describe("Environment variable of the mcprl server holding the judge's API key; only variables the operator granted for this base_url (default: OPENAI_API_KEY where granted, else no key)"),
          })
          .optional()
          .describe('An OpenAI-compatible RULER judge'),
      },
      outputSchema: { run: z.string(), status: z.literal('starting'), run_dir: z.string() },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    guarded(async ({ target, model, run, scenarios, offline, count, options, reward, judge }) => {
      const t = targetFromInput(ws, target, ctx.allowCommands);
      const name = Workspace.checkRunName(run ?? `run-${stamp()}`);
      const modelDir = ws.resolveModel(model, 'model');
      if (!existsSync(path.join(modelDir, 'config.json'))) throw new McprlError('WORKSPACE', `model ${JSON.stringify(model)} is not a Hugging Face model folder (no config.json)`);
      let scenariosDir: string | undefined;
      if (scenarios !== undefined) {
        scenariosDir = ws.resolve(scenarios, 'scenarios');
        // Read it now, so that a bad set (or one that overlaps the model's own tasks) is an error of this call
        // rather than a failed run a minute later.
        const set = await loadScenarioSet(scenariosDir);
        if (set.train.length === 0 || set.val.length === 0) throw new McprlError('WORKSPACE', `scenarios ${scenarios}: training needs at least one train and one val scenario`);
        await checkHeldOut(set, modelDir);
      } else if (!offline) throw new McprlError('WORKSPACE', 'give scenarios (a folder in the workspace, see generate_scenarios) or offline: true');
      const judgeKey = judge ? ctx.keys.resolve(judge.api_key_env, judge.base_url, 'judge') : undefined;
      // The target is reached and its tools listed before the run starts: one that is down, or has no tools,
      // fails this call instead of a run that was reported started.
      const tools = await withSession(ctx, t, isolationFromInput(ws, target), (s) => s.listTools());
      if (tools.length === 0) throw new McprlError('WORKSPACE', `the target ${describeTarget(t)} lists no tools: there is nothing to train on`);
      const settings = settingsFromInput(options, reward);
      if (settings.device === undefined && ctx.device !== undefined) settings.device = ctx.device;
      // A device that cannot run fails this call, naming what is missing, before the run folder exists.
      chooseDevice(settings.device, { modelDir });
      const config = trainConfigFrom(settings, {
        model: modelDir, target: describeTarget(t), ...(judge && judgeKey ? { judge: { baseURL: judgeKey.baseURL, model: judge.model } } : {}),
      }, 'add judge: {base_url, model, api_key_env?}');
      const { run: started } = await ctx.jobs.start(name, t, {
        config,
        scenarios: { dir: scenariosDir, offline: scenariosDir ? undefined : offline, count },
        isolation: isolationFor(ws, target, t),
        judgeApiKeyEnv: JUDGE_KEY_ENV,
        ...(ctx.connectTimeoutMs !== undefined ? { connectTimeoutMs: ctx.connectTimeoutMs } : {}),
      }, judgeKey?.apiKey);
      return ok({ run: started, status: 'starting' as const, run_dir: ws.display(ws.runDir(started)) }, `started run ${started}; watch it with training_status`);
    }),
  );
}
