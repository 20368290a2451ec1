/** The MCP layer's public API. Other layers import from here only. */
export type { Target, ToolAnnotations, ToolInfo, ToolCallOutcome, CallToolOptions } from './types.js';
export { connect, McpSession } from './session.js';
export type { ConnectOptions, ServerIdentity } from './session.js';
export type { TransportKind } from './connection.js';
export { childEnvironment } from './connection.js';
export { McpConnectError, McpListError } from './errors.js';
export type { McpConnectErrorCode, McpListErrorCode } from './errors.js';
export { SafetyPolicy } from './policy.js';
export { redact, secretsOf, secretValues, REDACTED } from './redact.js';
export type { SafetyPolicyOptions, PolicyDecision } from './policy.js';
export { toOpenAITools, toFunctionParameters } from './openai-tools.js';
export type { OpenAITool } from './openai-tools.js';
export { toToolInfo, ANNOTATION_DEFAULTS } from './catalog.js';
export { resultToText, capText, DEFAULT_MAX_OUTPUT_CHARS } from './normalize.js';
export { targetFromConfigFile, targetFromConfig, describeTarget, McpConfigFileSchema } from './config.js';
export type { McpConfigFile } from './config.js';
export { inspectSession } from './inspect.js';
export type { InspectReport } from './inspect.js';
