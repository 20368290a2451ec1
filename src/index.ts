import { McprlError } from './util/errors.js';
import { rulerScoreGroup } from './backend/ruler.js';
import { TrajectorySchema, type Trajectory } from './backend/schemas.js';

export { buildProgram } from './cli/main.js';
export { McprlError };
export {
  connect,
  McpSession,
  McpConnectError,
  McpListError,
  SafetyPolicy,
  IsolationSchema,
  rolloutStateIsolated,
  checkSandboxFrom,
  refusedWrites,
  writeRemedy,
  SANDBOX_PLACEHOLDER,
  SandboxError,
  toOpenAITools,
  targetFromConfigFile,
  inspectSession,
  login,
  removeLogin,
} from './mcp/index.js';
export type {
  Target,
  ToolAnnotations,
  ToolInfo,
  ToolCallOutcome,
  ToolExecution,
  CallToolOptions,
  ConnectOptions,
  ServerIdentity,
  OpenAITool,
  SafetyPolicyOptions,
  PolicyDecision,
  Isolation,
  IsolationOptions,
  InspectReport,
  LoginEvent,
  LoginOptions,
  LoginResult,
} from './mcp/index.js';
// A policy samples as it is made to (temperature, tokens per turn: OpenAIPolicy's and EnginePolicy's options); a
// PolicyRequest, rollout, rolloutGroups and runEval carry no sampling of their own.
export { OpenAIPolicy, PolicyError } from './agent/policy.js';
export type { Policy, PolicyRequest, PolicyTurn } from './agent/policy.js';
export { ChatMessageSchema } from './chat/message.js';
export { OpenAIToolSchema } from './chat/tool.js';
export type { ChatMessage } from './chat/message.js';
export { rollout, COMPLETE_TASK, DEFAULT_SYSTEM_PROMPT } from './agent/rollout.js';
export { rolloutGroups } from './agent/rollout-groups.js';
export type { RolloutOptions } from './agent/rollout.js';
export type { RolloutGroupsOptions } from './agent/rollout-groups.js';
// What an MCP rollout records (scenario, tool calls, checks, metrics); the library's Trajectory is below.
export { McpTrajectorySchema } from './agent/trajectory.js';
export type { McpTrajectory } from './agent/trajectory.js';
export { runEval, isSuccess } from './eval/evaluate.js';
export type { EvalOptions, EvalSummary } from './eval/evaluate.js';
export { rulerScores } from './ruler/ruler.js';
export type { RulerOptions, RulerResult } from './ruler/ruler.js';
export { JudgeError, OpenAIJudge } from './ruler/judge.js';
export type { JudgeClient } from './ruler/judge.js';
export { DEFAULT_RUBRIC } from './ruler/prompt.js';
export { scoreChecks } from './ruler/checks.js';
export { measureQuality, formatQuality, ScenarioQualitySchema } from './ruler/quality.js';
export type { ScenarioQuality } from './ruler/quality.js';
export { blendRewards, RewardModeSchema, resolveRewardMode } from './ruler/blend.js';
export type { RewardMode } from './ruler/blend.js';
export {
  ScenarioSchema,
  CheckSchema,
  readScenarios,
  writeScenarioSet,
  loadScenarioSet,
  argsMatch,
  answerContains,
  generateOfflineScenarios,
  scenarioEntities,
  generateLlmScenarios,
  ScenarioGenerationError,
  splitScenarios,
  generateScenarioSet,
  ScenarioSummarySchema,
  ToolCoverageSchema,
  formatCoverage,
  createGrounder,
  InfeasibleReasonSchema,
} from './scenarios/index.js';
export type {
  Scenario,
  ScenarioSet,
  Check,
  OfflineOptions,
  OfflineResult,
  LlmGeneratorOptions,
  LlmResult,
  ScenarioSetOptions,
  ScenarioSummary,
  ToolCoverage,
  NoScenarioReason,
  InfeasibleReason,
  Solution,
  DiscoveredEntity,
} from './scenarios/index.js';
export { exportModel, ExportFormatSchema, ExportRequestSchema } from './export/export-model.js';
export type { ExportFormat, ExportRequest, ExportSummary } from './export/export-model.js';
export { ExportError } from './export/errors.js';
export type { ExportErrorCode } from './export/errors.js';
export { exportOnnx } from './export/onnx.js';
export type { OnnxExportOptions, OnnxExportResult } from './export/onnx.js';
export { mergeAdapter } from './export/merge.js';
export type { MergeOptions } from './export/merge.js';
export { ChatEngine, ChatError } from './chat/chat-engine.js';
export type {
  ChatTurnRequest,
  ChatSampling,
  ChatPrompt,
  ChatResult,
  ChatChoice,
  ChatStreamEvent,
  ChatErrorCode,
  ChatEngineOptions,
  LoadChatEngineOptions,
} from './chat/chat-engine.js';
export { ChatRequestError, chatRequestSchema, parseChatRequest, toTurnRequest } from './serve/openai-chat.js';
export type { ChatRequest } from './serve/openai-chat.js';
export { startServer, createChatServer } from './serve/server.js';
export type { ServerOptions, RunningServer } from './serve/server.js';
export { AdapterRequestError, loadLoraAdapterRequestSchema, unloadLoraAdapterRequestSchema } from './serve/lora-adapters.js';
export type { AdapterErrorType, LoadLoraAdapterRequest, UnloadLoraAdapterRequest } from './serve/lora-adapters.js';
export { EnginePolicy } from './agent/engine-policy.js';
export type { EnginePolicyOptions } from './agent/engine-policy.js';
export { HfTokenizer, IncrementalDecoder } from './chat/tokenizer.js';
export { ChatTemplate, ChatTemplateError } from './chat/chat-template.js';
export { parseToolCalls } from './chat/parse-tool-call.js';
export type { ParsedAssistantText, ParsedToolCall, InvalidToolCall } from './chat/parse-tool-call.js';
export { Trainer, LossConfigSchema, OptimizerConfigSchema } from './engine/trainer.js';
export type { TrainSequence, LossConfig, OptimizerConfig, StepMetrics, CreateTrainerOptions, ResumeTrainerOptions, StepOptions } from './engine/trainer.js';
export { readPeftAdapter, writePeftAdapter, readOptimizerState, loraKey, loraScale, AdapterError, LORA_TARGETS } from './hf/peft.js';
export type { PeftAdapter, AdapterConfig, LoraMatrix, LoraTarget } from './hf/peft.js';
export { resolveModel, HubError } from './hf/hub.js';
export type { ResolveModelOptions, DownloadProgress, HubErrorCode } from './hf/hub.js';
export { hubCacheDir, isHubId } from './hf/hub-cache.js';

// runTrainJob takes the job's config as trainConfigFrom, parseTrainConfig or TrainJobSchema parsed it, and parses it no more.
export { train, runTrainJob } from './mcp-rl/train.js';
export { pickScenarios } from './mcp-rl/gather.js';
export type { TrainRunOptions, TrainRunResult, TrainJobOptions, TrainJobResult } from './mcp-rl/train.js';
export { TrainSettingsSchema, TrainConfigSchema, PolicyLossSchema, trainConfigFrom, parseTrainConfig } from './train/config.js';
export type { TrainSettings, TrainConfig, PolicyLoss } from './train/config.js';
export { TrainJobSchema } from './mcp-rl/job.js';
export type { TrainJob } from './mcp-rl/job.js';
export { ProgressLog, readLatestProgress } from './train/progress-log.js';
export { ProgressEventSchema, terminalBars } from './util/progress.js';
export type { ProgressEvent, ProgressPhase, ProgressListener, OnProgress, BarStream } from './util/progress.js';
export { RunDir, RunStateSchema } from './train/run-dir.js';
export type { RunState } from './train/run-dir.js';
export { trajectoryToSequences, tokenizationReport, emptyTokenizationReport } from './train/tokenize.js';
export type { TokenizationReport } from './train/tokenize.js';
export { RolloutPool, RolloutPoolSettingsSchema } from './train/rollout-pool.js';
export type { RolloutPoolSettings, RolloutPoolEvents, AdapterWriter } from './train/rollout-pool.js';
export { applyTruncatedIs } from './train/off-policy.js';
export type { OffPolicyMetrics } from './train/off-policy.js';
export { startOtlpTracing, startSpan, inSpan, withinSpan, tracingOn } from './util/tracing.js';
export type { TraceSpan, TraceAttributes } from './util/tracing.js';
export { groupAdvantages, advantagesFor } from './train/advantages.js';
export { renderReport } from './train/report.js';
export { writeRunReport, exportBestAdapter } from './train/write-report.js';
export { assertDisjoint, findOverlaps, entityKey, OverlapIndex, overlapGroups } from './scenarios/disjoint.js';

export { TrainableModel } from './backend/trainable-model.js';
export { LocalBackend } from './backend/local-backend.js';
export { DeviceSchema, chooseDevice } from './engine/device.js';
export type { Device, DeviceChoice } from './engine/device.js';
export { RemoteBackend } from './backend/remote-backend.js';
export { startBackendServer } from './backend/server.js';
export type { BackendServerOptions, RunningBackendServer } from './backend/server.js';
export type { LocalBackendOptions } from './backend/local-backend.js';
export type { Backend, ModelKey, StepCallOptions } from './backend/backend.js';
export { BackendError } from './backend/errors.js';
export type { BackendErrorCode } from './backend/errors.js';
export { TrajectoryRecorder } from './backend/recorder.js';
export { gatherTrajectoryGroups, GatherError } from './backend/gather.js';
export { rulerScoreGroup } from './backend/ruler.js';
export type { GatherOptions, RolloutContext, RolloutFailure } from './backend/gather.js';
export {
  TrainableModelSettingsSchema,
  ModelKeySchema,
  LoraSettingsSchema,
  TrajectorySchema,
  TrajectoryGroupSchema,
  TrainStepConfigSchema,
  SftTrajectorySchema,
  SftConfigSchema,
  TrainResultSchema,
  CheckpointSchema,
  ModelEndpointSchema,
  ExportOptionsSchema,
  ExportResultSchema,
  StepStreamLineSchema,
} from './backend/schemas.js';
export type {
  TrainableModelSettings,
  TrainableModelSettingsInput,
  Trajectory,
  TrajectoryInput,
  TrajectoryGroup,
  TrajectoryGroupInput,
  TrainStepConfig,
  TrainStepConfigInput,
  SftTrajectoryInput,
  SftConfigInput,
  TrainResult,
  Checkpoint,
  DeleteCheckpointsInput,
  ModelEndpoint,
  ExportOptionsInput,
  ExportResult,
  StepStreamLine,
} from './backend/schemas.js';

// Error classes no caller branched on became codes on McprlError (docs/library.md, "Errors"). Their old names stay
// importable as McprlError itself, so `instanceof` on one now matches every McprlError: compare `code` instead.
/** @deprecated McprlError with code TRAIN_INVALID_BATCH, TRAIN_INVALID_CONFIG, TRAIN_NATIVE or TRAIN_CLOSED. */
export const TrainError = McprlError;
/** @deprecated McprlError. */
export type TrainError = McprlError;
/** @deprecated McprlError with code TOKENIZER_NOT_FOUND or TOKENIZER_INVALID. */
export const TokenizerError = McprlError;
/** @deprecated McprlError. */
export type TokenizerError = McprlError;
/** @deprecated McprlError with code TOKENIZE. */
export const TokenizeError = McprlError;
/** @deprecated McprlError. */
export type TokenizeError = McprlError;
/** @deprecated McprlError with code ROLLOUT_POOL_EMPTY or ROLLOUT_POOL_SETTINGS. */
export const RolloutPoolError = McprlError;
/** @deprecated McprlError. */
export type RolloutPoolError = McprlError;
/** @deprecated McprlError with code TRACING_ALREADY_ON or TRACING_UNAVAILABLE. */
export const TracingError = McprlError;
/** @deprecated McprlError. */
export type TracingError = McprlError;
/** @deprecated McprlError with code SCENARIO_OVERLAP. */
export const OverlappingScenariosError = McprlError;
/** @deprecated McprlError. */
export type OverlappingScenariosError = McprlError;

// Earlier names of the library's pieces, kept for code that imports them (docs/library.md, "Names").
/** @deprecated rulerScoreGroup, ART's ruler_score_group. */
export const ruler = rulerScoreGroup;
/** @deprecated TrajectorySchema. */
export const LibraryTrajectorySchema = TrajectorySchema;
/** @deprecated Trajectory. */
export type LibraryTrajectory = Trajectory;
