/**
 * mcprl as an MCP server: the tools and resources an assistant uses to inspect an MCP server, write scenarios
 * for it, train a model on it in the background, watch and stop the run, evaluate the result, put the trained
 * agent to work, and export it. Each tool is a thin layer over the function the matching CLI command calls.
 *
 * Rules every tool keeps: paths in and out are confined to the workspace (see workspace.ts); targets obey the
 * operator's SafetyPolicy (set when the server starts, never by a tool argument); header and environment values
 * of targets are used, never echoed (they are redacted from every error); a stdio target (a command to run) is
 * refused unless the operator allows commands, as stdio does and HTTP does with --allow-commands; LLM API keys
 * come only from variables the operator granted, and go only where granted (api-keys.ts); bad arguments and
 * failures come back as isError results.
 */
import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { z } from 'zod';
import { rollout } from '../agent/rollout.js';
import { AGENT_TOOL_ROLLOUT_DEFAULTS, RolloutSettingsSchema } from '../agent/rollout-settings.js';
import { runEval, writeEvalOutput, formatEvalSummary } from '../eval/evaluate.js';
import { exportModel } from '../export/export-model.js';
import {
  callSetting,
  checkSandboxFrom,
  connect,
  describeTarget,
  inspectSession,
  isolatedServerOpener,
  IsolationSchema,
  refusedWrites,
  redact,
  secretValues,
  type Isolation,
  type McpSession,
  type SafetyPolicy,
  type Target,
} from '../mcp/index.js';
import { loadScenarioSet, readScenarios, writeScenarioSet, type Scenario } from '../scenarios/scenario.js';
import { generateScenarioSet, ScenarioSummarySchema } from '../scenarios/scenario-set.js';
import { formatCoverage } from '../scenarios/coverage.js';
import { chooseDevice, type Device } from '../engine/device.js';
import { trainConfigFrom, TrainSettingsSchema } from '../train/config.js';
import { RunDir } from '../train/run-dir.js';
import { checkHeldOut } from '../mcp-rl/job.js';
import { AgentEngines, compactTrace, resolveAgent } from './agent.js';
import { ApiKeyPolicy, type KeyGrant } from './api-keys.js';
import { settingsFromInput, TrainOptionsInput } from './train-input.js';
import { JUDGE_KEY_ENV, progressValue, RunPhaseSchema, TrainingJobs, type RunStatus } from './training-jobs.js';
import { Workspace } from './workspace.js';
import { SUPPORTED_MODEL_TYPES } from '../hf/config.js';
import { McprlError } from '../util/errors.js';

export const MCPRL_SERVER_VERSION = '0.1.0';

export interface McprlServerContext {
  workspace: Workspace;
  /** The operator's policy for the target servers' tools (from --allow-destructive / --allow / --deny). */
  safety: SafetyPolicy;
  jobs: TrainingJobs;
  engines: AgentEngines;
  /** Whether tools may start a stdio target (run a command). Off over HTTP unless the operator passes --allow-commands. */
  allowCommands: boolean;
  /** Which environment variables may be sent as LLM API keys, and where (--allow-key-env). */
  keys: ApiKeyPolicy;
  /** Connect/initialize timeout for targets, ms. Default 30000. */
  connectTimeoutMs?: number;
  /** Where in-process models run (mcprl mcp --device): the agent's, and a training run's unless it names one. Default auto. */
  device?: Device;
}

export interface ContextOptions {
  /** Default false: a client may then only name url targets. */
  allowCommands?: boolean;
  /** Grants besides OPENAI_API_KEY for https://api.openai.com/. */
  keyGrants?: KeyGrant[];
  /** Where in-process models run. Default auto. */
  device?: Device;
}

/** Builds the shared state of one server process (HTTP sessions share it; each gets its own McpServer). */
export function createContext(workspace: Workspace, safety: SafetyPolicy, opts: ContextOptions = {}): McprlServerContext {
  return {
    workspace, safety, jobs: new TrainingJobs(workspace, safety), engines: new AgentEngines(opts.device),
    allowCommands: opts.allowCommands ?? false, keys: new ApiKeyPolicy(opts.keyGrants ?? []),
    ...(opts.device !== undefined ? { device: opts.device } : {}),
  };
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

// ── schemas ────────────────────────────────────────────────────────────────────────────────────────────────

const TargetInput = z
  .object({
    url: z.string().optional().describe('Streamable HTTP (or SSE) endpoint of the MCP server, http(s)://…'),
    headers: z.record(z.string(), z.string()).optional().describe('HTTP headers for url, e.g. Authorization (used, never echoed)'),
    command: z.string().optional().describe('Command that starts a stdio MCP server, e.g. "npx"'),
    args: z.array(z.string()).optional().describe('Arguments of command'),
    env: z.record(z.string(), z.string()).optional().describe('Extra environment for command (used, never echoed)'),
    cwd: z.string().optional().describe('Working directory for command, inside the workspace (default: the mcprl server\'s)'),
    isolate: z.boolean().optional().describe('A fresh server per rollout, each with its own {sandbox} directory; tools that write run only then, and only when the target keeps its state in {sandbox} (or state_in_memory) (default false)'),
    sandbox_from: z.string().optional().describe('A folder in the workspace copied into every {sandbox} (write {sandbox} in args, env or cwd); the folder itself is never written'),
    // The library's own field (IsolationSchema.stateInMemory), optional here as every target argument is.
    state_in_memory: IsolationSchema.shape.stateInMemory.unwrap().optional().describe(
      'The server keeps its state in memory only (nothing on disk): with isolate, its tools that write run without a {sandbox} (default false)',
    ),
  })
  .describe('The MCP server to work on: either {url, headers?} or {command, args?, env?, cwd?}');
type TargetInputT = z.infer<typeof TargetInput>;

/** The rollout settings' fields, which the tools' max_turns, max_tokens, temperature and concurrency are. */
const rolloutFields = RolloutSettingsSchema.shape;

const AgentInput = {
  run: z.string().optional().describe('A training run in the workspace: its base model and best (or latest) adapter'),
  checkpoint: z.enum(['best', 'latest']).optional().describe("With run: which checkpoint answers (default 'best')"),
  model: z.string().optional().describe('Instead of run: a Hugging Face model folder (workspace or --models root)'),
  adapter: z.string().optional().describe('With model: a PEFT adapter folder in the workspace'),
  // The training setting's own schema: the same values a run trains with are accepted here.
  chat_template_kwargs: TrainSettingsSchema.shape.chatTemplateKwargs.describe(
    'Chat template variables for every turn, e.g. {"enable_thinking": false}; over those the run trained with',
  ),
};

const ToolSummary = z.object({
  name: z.string(),
  access: z.enum(['read-only', 'write', 'destructive']),
  allowed: z.boolean(),
  remedy: z.string().optional().describe('When not allowed: what would let it run (a target argument, or an option of this server)'),
  description: z.string(),
});

const RunStatusOutput = {
  run: z.string(),
  status: z.enum(['starting', 'running', 'finished', 'stopped', 'failed', 'incomplete']),
  phase: RunPhaseSchema,
  step: z.number().int().nullable(),
  max_steps: z.number().int().nullable(),
  best_step: z.number().int().nullable(),
  best_val_success: z.number().nullable(),
  val_success_before: z.number().nullable(),
  stopped_reason: z.string().nullable(),
  latest_metrics: z.record(z.string(), z.unknown()).nullable(),
  activity: z.string().nullable(),
  progress: z
    .object({ phase: z.string(), step: z.number().int(), done: z.number().int(), total: z.number().int() })
    .nullable()
    .describe("The run's newest progress event while it runs: phase, the step in flight, done of total units"),
  adapter: z.string().nullable(),
  report: z.string().nullable(),
  error: z.string().nullable(),
  started_at: z.string().nullable(),
  ended_at: z.string().nullable(),
};

const EvalSummaryOutput = z.object({
  model: z.string(),
  reward_mode: z.string(),
  scenarios: z.number(),
  rollouts_per_group: z.number(),
  trajectories: z.number(),
  success_rate: z.number(),
  successes: z.number(),
  mean_reward: z.number().nullable(),
  tool_call_validity_rate: z.number(),
  tool_calls: z.number(),
  invalid_calls: z.number(),
  tool_errors: z.number(),
  unknown_outcomes: z.number().describe('Calls whose outcome is unknown (connection lost, timed out mid-call): counted as failures'),
  mean_turns: z.number(),
  completed_rate: z.number(),
  ran_out_of_turns: z.number(),
  judge_groups: z.number(),
  judge_failures: z.number(),
  unscored_trajectories: z.number(),
  rollout_errors: z.number(),
  duration_ms: z.number(),
  per_scenario: z.array(z.object({ scenario_id: z.string(), success_rate: z.number(), mean_reward: z.number().nullable() })),
});

// ── helpers ────────────────────────────────────────────────────────────────────────────────────────────────

/** A tool result: the structured object, and the same as JSON text for clients that only show text. */
function ok<T extends Record<string, unknown>>(structured: T, lead?: string): CallToolResult {
  const json = JSON.stringify(structured, null, 2);
  return { content: [{ type: 'text', text: lead ? `${lead}\n${json}` : json }], structuredContent: structured };
}

/** Tool failures come back as data; the message is one line, with nothing secret in it. */
function fail(err: unknown, secrets: readonly string[] = []): CallToolResult {
  const msg = redact((err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim(), secrets);
  const code = (err as { code?: unknown })?.code;
  return { content: [{ type: 'text', text: typeof code === 'string' && !msg.startsWith(code) ? `${code}: ${msg}` : msg }], isError: true };
}

/** The header and environment values a tool's `target` argument carries, whatever shape it has. */
function targetSecrets(args: unknown): string[] {
  const t = (args as { target?: unknown } | undefined)?.target as { headers?: unknown; env?: unknown } | undefined;
  const strings = (r: unknown) => (r && typeof r === 'object' ? Object.values(r).filter((v): v is string => typeof v === 'string') : []);
  return t && typeof t === 'object' ? secretValues([...strings(t.headers), ...strings(t.env)]) : [];
}

function guarded<A>(fn: (args: A, extra: Extra) => Promise<CallToolResult>) {
  return async (args: A, extra: Extra): Promise<CallToolResult> => {
    try {
      return await fn(args, extra);
    } catch (err) {
      return fail(err, targetSecrets(args));
    }
  };
}

/**
 * Turns the tool argument into a Target; a stdio cwd must lie in the workspace, and a stdio target at all only
 * where the operator allows commands.
 */
export function targetFromInput(ws: Workspace, t: TargetInputT, allowCommands: boolean): Target {
  if ((t.url === undefined) === (t.command === undefined)) throw new McprlError('WORKSPACE', 'target needs exactly one of url or command');
  if (t.url !== undefined) {
    if (t.command !== undefined || t.args || t.env || t.cwd) throw new McprlError('WORKSPACE', 'an url target takes only headers besides url');
    let u: URL;
    try {
      u = new URL(t.url);
    } catch {
      throw new McprlError('WORKSPACE', `target.url is not a valid URL: ${JSON.stringify(t.url)}`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new McprlError('WORKSPACE', 'target.url must be http(s)://');
    return { kind: 'http', url: t.url, ...(t.headers ? { headers: t.headers } : {}) };
  }
  if (t.headers) throw new McprlError('WORKSPACE', 'headers apply to url targets only');
  if (!allowCommands) {
    throw new McprlError('WORKSPACE', 'this mcprl server does not run commands for its clients (it serves HTTP): give target.url, or ask the operator to start it with --allow-commands');
  }
  const target: Target = { kind: 'stdio', command: t.command!, args: t.args ?? [] };
  if (t.env) target.env = t.env;
  if (t.cwd !== undefined) target.cwd = ws.resolve(t.cwd, 'target.cwd');
  return target;
}

/** Isolation from the target argument; sandbox_from must lie in the workspace. */
export function isolationFromInput(ws: Workspace, t: TargetInputT): Isolation {
  return IsolationSchema.parse({
    isolate: t.isolate, stateInMemory: t.state_in_memory,
    ...(t.sandbox_from !== undefined ? { sandboxFrom: ws.resolve(t.sandbox_from, 'target.sandbox_from') } : {}),
  });
}

/** Isolation from the target argument, for `target` (as targetFromInput made it): sandbox_from needs a {sandbox}. */
function isolationFor(ws: Workspace, input: TargetInputT, target: Target): Isolation {
  const isolation = isolationFromInput(ws, input);
  checkSandboxFrom(target, isolation.sandboxFrom, 'target.sandbox_from');
  return isolation;
}

/** A session for one piece of work; `isolated` when that work is a single rollout with a server of its own. */
async function withSession<T>(ctx: McprlServerContext, target: Target, isolation: Isolation, fn: (s: McpSession) => Promise<T>, isolated = false): Promise<T> {
  checkSandboxFrom(target, isolation.sandboxFrom, 'target.sandbox_from');
  const session = await connect(target, {
    policy: ctx.safety, timeoutMs: ctx.connectTimeoutMs, sandboxFrom: isolation.sandboxFrom, stateInMemory: isolation.stateInMemory, isolated: isolated && isolation.isolate,
  });
  try {
    return await fn(session);
  } finally {
    await session.close();
  }
}

const stamp = () => new Date().toISOString().replace(/[:.]/g, '-').replace(/Z$/, '');

/** A scenario set folder or one .jsonl file in the workspace. */
async function scenariosFrom(ws: Workspace, where: string, split: 'train' | 'val' | 'all'): Promise<Scenario[]> {
  const abs = ws.resolve(where, 'scenarios');
  if (!existsSync(abs)) throw new McprlError('WORKSPACE', `scenarios ${JSON.stringify(where)} not found in the workspace`);
  if ((await stat(abs)).isFile()) return readScenarios(abs);
  const set = await loadScenarioSet(abs);
  return split === 'train' ? set.train : split === 'val' ? set.val : [...set.train, ...set.val];
}

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

function statusLine(s: RunStatus): string {
  const pct = (x: number | null) => (x === null ? '–' : `${(x * 100).toFixed(1)}%`);
  return `run ${s.run}: ${s.status}${s.status === 'running' ? ` (${s.phase})` : ''}, step ${s.step ?? '–'}/${s.max_steps ?? '–'}, ` +
    `validation success ${pct(s.val_success_before)} → best ${pct(s.best_val_success)} (step ${s.best_step ?? '–'})${s.error ? `; ${s.error}` : ''}`;
}

// ── the server ─────────────────────────────────────────────────────────────────────────────────────────────

/** A new McpServer with mcprl's tools and resources, over the shared context. */
export function createMcprlServer(ctx: McprlServerContext): McpServer {
  const ws = ctx.workspace;
  const server = new McpServer(
    { name: 'mcprl', version: MCPRL_SERVER_VERSION },
    {
      instructions:
        'mcprl trains small open models to use an MCP server\'s tools by reinforcement learning. Typical flow: ' +
        'inspect_server → generate_scenarios → start_training → training_status (wait: true) → evaluate / run_agent → ' +
        'export_adapter. Paths are relative to the workspace.',
    },
  );

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

  server.registerTool(
    'generate_scenarios',
    {
      title: 'Generate training scenarios',
      description:
        'Write a scenario set (train.jsonl + val.jsonl) for an MCP server into the workspace (scenarios/<name>). offline: verifiable ' +
        'tasks from the tool schemas and read-only tools (no LLM). Otherwise an OpenAI-compatible LLM writes them (generator.model; ' +
        'its API key is read from the environment variable generator.api_key_env of the mcprl server, which the operator must have ' +
        'granted for that base_url; without api_key_env, OPENAI_API_KEY where granted (https://api.openai.com), else no key).',
      inputSchema: {
        target: TargetInput,
        count: z.number().int().min(2).max(500).default(24).describe('Scenarios in total (train + val)'),
        offline: z.boolean().default(false),
        generator: z
          .object({ model: z.string(), base_url: z.string().optional(), api_key_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).optional() })
          .optional(),
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
          ...(generator && key ? { generator: { model: generator.model, baseURL: key.baseURL, apiKey: key.apiKey ?? 'no-key' } } : {}),
        });
      });
      if (set.train.length + set.val.length === 0) throw new Error('no scenarios could be generated for this server');
      await writeScenarioSet(out, set.train, set.val);
      return ok(
        { path: ws.display(out), train: set.train.length, val: set.val.length, summary: set.summary, ...(refused ? { refused_writes: refused } : {}) },
        [`wrote ${set.train.length} train and ${set.val.length} val scenarios to ${ws.display(out)}`, ...(refused ? [refused] : []), ...formatCoverage(set.summary.coverage)].join('\n'),
      );
    }),
  );

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

  server.registerTool(
    'evaluate',
    {
      title: 'Evaluate an agent',
      description:
        'Run the trained agent (a run, or a model with an adapter) on scenarios against an MCP server and score it with the ' +
        "scenarios' verifiable checks. Default scenarios: the run's validation set. Writes evals/<name>/{trajectories.jsonl,summary.json}.",
      inputSchema: {
        target: TargetInput,
        ...AgentInput,
        scenarios: z.string().optional().describe('Scenario set folder or .jsonl file in the workspace'),
        split: z.enum(['train', 'val', 'all']).default('val'),
        limit: z.number().int().positive().optional(),
        rollouts: z.number().int().positive().max(16).default(1),
        max_turns: rolloutFields.maxTurns.max(50).optional(),
        max_tokens: rolloutFields.maxTokens.optional(),
        temperature: rolloutFields.temperature.default(AGENT_TOOL_ROLLOUT_DEFAULTS.temperature),
        concurrency: rolloutFields.concurrency.max(32).default(AGENT_TOOL_ROLLOUT_DEFAULTS.concurrency),
        name: z.string().optional().describe('Folder name under evals/ (default a timestamp)'),
      },
      outputSchema: { agent: z.string(), summary: EvalSummaryOutput, files: z.object({ trajectories: z.string(), summary: z.string() }) },
      // The agent calls the target's tools: only those the operator's safety policy allows (by default read-only and
      // additive ones), so it can change the target's state but not destroy it.
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    guarded(async (a) => {
      const t = targetFromInput(ws, a.target, ctx.allowCommands);
      const agent = await resolveAgent(ws, a);
      let scenarios: Scenario[];
      if (a.scenarios !== undefined) scenarios = await scenariosFrom(ws, a.scenarios, a.split);
      else if (a.run !== undefined) scenarios = await scenariosFrom(ws, path.join(a.run, 'scenarios'), a.split);
      else throw new McprlError('WORKSPACE', 'give scenarios (or a run, whose validation set is used)');
      if (a.limit !== undefined) scenarios = scenarios.slice(0, a.limit);
      if (scenarios.length === 0) throw new McprlError('WORKSPACE', 'no scenarios to evaluate');
      const outName = Workspace.checkName(a.name ?? `${a.run ?? 'model'}-${stamp()}`, 'evaluation name');
      const out = ws.resolve(path.join('evals', outName), 'evaluation folder');
      if (existsSync(out)) throw new McprlError('WORKSPACE', `evals/${outName} already exists; choose another name`);
      const maxTurns = a.max_turns ?? agent.runConfig?.maxTurns ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTurns;
      const maxTokens = a.max_tokens ?? agent.runConfig?.maxTokens ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTokens;
      const { groups, summary } = await ctx.engines.with(agent, { maxTokens, temperature: a.temperature }, (policy) =>
        runEval({
          policy, target: t, scenarios, reward: 'checks', rolloutsPerGroup: a.rollouts, concurrency: a.concurrency,
          policyForSafety: ctx.safety, ...isolationFor(ws, a.target, t), maxTurns, temperature: a.temperature, seed: 1,
        }),
      );
      const files = await writeEvalOutput(out, groups, summary);
      return ok(
        { agent: agent.label, summary: summary as unknown as Record<string, unknown>, files: { trajectories: ws.display(files.trajectories), summary: ws.display(files.summary) } },
        formatEvalSummary(summary),
      );
    }),
  );

  server.registerTool(
    'run_agent',
    {
      title: 'Run the trained agent on a task',
      description: 'The trained agent (a run, or a model with an adapter) performs one task on an MCP server; returns its final answer and a compact trace.',
      inputSchema: {
        target: TargetInput,
        task: z.string().min(1).describe('What the agent should do, in plain words'),
        ...AgentInput,
        max_turns: rolloutFields.maxTurns.max(50).optional(),
        max_tokens: rolloutFields.maxTokens.optional(),
        temperature: rolloutFields.temperature.default(AGENT_TOOL_ROLLOUT_DEFAULTS.temperature),
      },
      outputSchema: {
        agent: z.string(),
        final_answer: z.string().nullable(),
        completed: z.boolean(),
        turns: z.number().int(),
        tool_calls: z.number().int(),
        tool_errors: z.number().int(),
        invalid_calls: z.number().int(),
        error: z.string().nullable(),
        trace: z.array(z.object({ kind: z.enum(['assistant', 'tool_call', 'tool_result']), name: z.string().optional(), text: z.string() })),
      },
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    },
    guarded(async (a, extra) => {
      const t = targetFromInput(ws, a.target, ctx.allowCommands);
      const agent = await resolveAgent(ws, a);
      const maxTurns = a.max_turns ?? agent.runConfig?.maxTurns ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTurns;
      const maxTokens = a.max_tokens ?? agent.runConfig?.maxTokens ?? AGENT_TOOL_ROLLOUT_DEFAULTS.maxTokens;
      // One rollout on a session of its own: with isolate, that server is this rollout's alone.
      const traj = await withSession(ctx, t, isolationFromInput(ws, a.target), async (session) => {
        const tools = await session.listTools();
        return ctx.engines.with(agent, { maxTokens, temperature: a.temperature }, (policy) =>
          rollout({
            policy, session, tools, scenario: { id: 'task', task: a.task, difficulty: 1, source: 'llm' },
            maxTurns, maxTokens, temperature: a.temperature, seed: 1, signal: extra.signal,
          }),
        );
      }, true);
      const result = {
        agent: agent.label,
        final_answer: traj.final_answer,
        completed: traj.metrics.completed,
        turns: traj.metrics.turns,
        tool_calls: traj.metrics.tool_calls,
        tool_errors: traj.metrics.tool_errors,
        invalid_calls: traj.metrics.invalid_calls,
        error: traj.error ?? null,
        trace: compactTrace(traj),
      };
      return ok(result, `final answer: ${traj.final_answer ?? '(none)'}`);
    }),
  );

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

  // ── resources: each run's report, metrics and config ──
  const RUN_FILES = { 'report.html': 'text/html', 'metrics.jsonl': 'application/jsonl', 'config.json': 'application/json' } as const;
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

  return server;
}
