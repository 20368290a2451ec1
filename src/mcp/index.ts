/** The MCP layer's public API. Other layers import from here only. */
export type { Target, ToolAnnotations, ToolInfo, ToolCallOutcome, ToolExecution, MediaBlock, CallToolOptions } from './types.js';
export { connect, isolatedServerOpener, McpSession, refusedWrites } from './session.js';
export type { ConnectOptions, ServerIdentity } from './session.js';
export type { TransportKind } from './connection.js';
export { childEnvironment } from './connection.js';
export { McpConnectError, McpListError } from './errors.js';
export type { McpConnectErrorCode, McpListErrorCode } from './errors.js';
export { callSetting, refusedWritesLine, SafetyPolicy, SafetyPolicySchema, unisolatedWriteReason, unisolatedWriteRefusal, writeRemedy } from './policy.js';
export {
  checkSandboxFrom,
  IsolationSchema,
  rolloutStateIsolated,
  SANDBOX_PLACEHOLDER,
  SandboxError,
  stateLocations,
  targetUsesSandbox,
  sandboxTarget,
  createSandbox,
  removeSandbox,
} from './sandbox.js';
export type { Isolation, IsolationOptions, StateLocation } from './sandbox.js';
export { redact, secretsOf, secretValues, REDACTED } from './redact.js';
export type { SafetyPolicyOptions, SafetyPolicySettings, PolicyDecision, CallSetting } from './policy.js';
export { toOpenAITools, toFunctionParameters } from './openai-tools.js';
export type { OpenAITool } from './openai-tools.js';
export { toToolInfo, ANNOTATION_DEFAULTS } from './catalog.js';
export { resultToText, mediaBlocks, capText, DEFAULT_MAX_OUTPUT_CHARS } from './normalize.js';
export { targetFromConfigFile, targetFromConfig, describeTarget, McpConfigFileSchema } from './config.js';
export type { McpConfigFile } from './config.js';
export { inspectSession } from './inspect.js';
export type { InspectReport } from './inspect.js';
export { login, DEFAULT_LOGIN_TIMEOUT_MS } from './oauth-login.js';
export type { LoginEvent, LoginOptions, LoginResult } from './oauth-login.js';
export { configDir, loginFile, readLogin, removeLogin, removeAllLogins, serverKey, StoredLoginSchema, CONFIG_DIR_ENV } from './oauth-store.js';
export type { StoredLogin } from './oauth-store.js';
