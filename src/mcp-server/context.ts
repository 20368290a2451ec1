/** The state one mcprl MCP server process shares among its HTTP sessions (each gets its own McpServer). */
import type { SafetyPolicy } from '../mcp/index.js';
import type { Device } from '../engine/device.js';
import { AgentEngines } from './agent.js';
import { ApiKeyPolicy, type KeyGrant } from './api-keys.js';
import { TrainingJobs } from './training-jobs.js';
import type { Workspace } from './workspace.js';

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
