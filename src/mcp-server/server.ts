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
 *
 * Each tool lives in tools/<tool>.ts and each resource in resources/; this file composes them.
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { McprlServerContext } from './context.js';
import { registerRunFiles } from './resources/run-files.js';
import { registerEvaluate } from './tools/evaluate.js';
import { registerExportAdapter } from './tools/export-adapter.js';
import { registerGenerateScenarios } from './tools/generate-scenarios.js';
import { registerInspectServer } from './tools/inspect-server.js';
import { registerListRuns } from './tools/list-runs.js';
import { registerRunAgent } from './tools/run-agent.js';
import { registerStartTraining } from './tools/start-training.js';
import { registerStopTraining } from './tools/stop-training.js';
import { registerTrainingStatus } from './tools/training-status.js';

export { createContext, type ContextOptions, type McprlServerContext } from './context.js';
export { isolationFromInput, targetFromInput } from './tools/target-input.js';

export const MCPRL_SERVER_VERSION = '0.1.0';

/** A new McpServer with mcprl's tools and resources, over the shared context. */
export function createMcprlServer(ctx: McprlServerContext): McpServer {
  const server = new McpServer(
    { name: 'mcprl', version: MCPRL_SERVER_VERSION },
    {
      instructions:
        'mcprl trains small open models to use an MCP server\'s tools by reinforcement learning. Typical flow: ' +
        'inspect_server → generate_scenarios → start_training → training_status (wait: true) → evaluate / run_agent → ' +
        'export_adapter. Paths are relative to the workspace.',
    },
  );
  // The order here is the order clients list the tools in: the typical flow.
  registerInspectServer(server, ctx);
  registerGenerateScenarios(server, ctx);
  registerStartTraining(server, ctx);
  registerTrainingStatus(server, ctx);
  registerStopTraining(server, ctx);
  registerListRuns(server, ctx);
  registerEvaluate(server, ctx);
  registerRunAgent(server, ctx);
  registerExportAdapter(server, ctx);
  registerRunFiles(server, ctx);
  return server;
}
