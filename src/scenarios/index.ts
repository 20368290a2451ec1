/** AutoRL scenarios: the public API of this folder. */
export {
  CheckSchema,
  ScenarioSchema,
  readScenarios,
  parseScenarios,
  formatScenarios,
  writeScenarioSet,
  loadScenarioSet,
  argsMatch,
  answerContains,
  normalizeAnswerText,
  checkedCalls,
  valueAnswerChecks,
} from './scenario.js';
export type { Check, Scenario, ScenarioSet } from './scenario.js';
export { generateOfflineScenarios, scenarioEntities, canonical } from './offline/index.js';
export type { ScenarioServer, OfflineOptions, OfflineResult, DiscoveredEntity } from './offline/index.js';
export { generateLlmScenarios, buildPrompt, ScenarioGenerationError, GeneratedItemSchema, SolutionSchema, promptEntities } from './llm.js';
export type { LlmGeneratorOptions, LlmResult, ServerCatalog, ResponseFormatMode, Solution } from './llm.js';
export { createGrounder } from './grounded.js';
export type { Grounder, GrounderOptions, Grounding } from './grounded.js';
export { synthesizeArgs, synthesizeValidValue, generateFromPattern, resolveRefs } from './json-schema-args.js';
export type { JsonSchema, SynthesisOptions, CandidateContext } from './json-schema-args.js';
export { dropNearDuplicates, taskSimilarity, normalizeTask, DuplicateFilter, DEFAULT_DUPLICATE_THRESHOLD } from './dedup.js';
export { splitScenarios, DEFAULT_VAL_FRACTION } from './split.js';
export { generateScenarioSet, ScenarioSummarySchema } from './scenario-set.js';
export { ToolCoverageSchema, NoScenarioReasonSchema, InfeasibleReasonSchema, InfeasibleCountsSchema, formatCoverage, formatInfeasible, scenariosPerTool } from './coverage.js';
export type { ToolCoverage, NoScenarioReason, InfeasibleReason, InfeasibleCounts } from './coverage.js';
export type { ScenarioSetOptions, ScenarioSummary } from './scenario-set.js';
export { createRng, hashString } from '../util/rng.js';
export type { Rng } from '../util/rng.js';
