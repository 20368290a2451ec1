export { buildProgram } from './cli/main.js';
export {
  connect,
  McpSession,
  McpConnectError,
  McpListError,
  SafetyPolicy,
  toOpenAITools,
  targetFromConfigFile,
} from './mcp/index.js';
export type {
  Target,
  ToolAnnotations,
  ToolInfo,
  ToolCallOutcome,
  CallToolOptions,
  ConnectOptions,
  ServerIdentity,
  OpenAITool,
  SafetyPolicyOptions,
  PolicyDecision,
} from './mcp/index.js';
