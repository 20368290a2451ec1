/**
 * The one shape of a chat message: OpenAI's, with plain-text content and tool-call arguments as JSON text, plus
 * mcprl's own fields. The rollout loop, its policies, trajectories (on disk, unchanged), the chat core and the
 * chat template all take this shape; what arrives from outside in OpenAI's looser forms (content parts, the
 * `developer` role, arguments as objects, nulls for absent fields) is converted to it at the edge
 * (src/serve/openai-chat.ts: chatMessageSchema).
 */
import { z } from 'zod';

export const ToolCallSchema = z.object({
  /**
   * Set on every call the rollout loop and the trajectory recorder keep; absent only where the sender gave none
   * (a request to `mcprl serve`), and then the chat template is given none either.
   */
  id: z.string().optional(),
  type: z.literal('function'),
  /** `arguments` is JSON object text, as the model wrote it (or as the client sent it, stringified). */
  function: z.object({ name: z.string(), arguments: z.string() }),
});

/**
 * On a tool answer: whether the server executed the call (src/mcp's ToolExecution; complete_task counts as
 * executed, calls the loop rejected as not_executed). Only executed calls count for checks. Absent in trajectories
 * recorded before it existed, and in those an application records itself: see agent/trajectory.ts wasExecuted.
 */
export const ToolExecutionSchema = z.enum(['executed', 'not_executed', 'unknown']);

/** Exact sampled token ids and logprobs of an assistant turn, when the policy returned them. */
export const SampledTokensSchema = z.object({
  token_ids: z.array(z.number().int()),
  logprobs: z.array(z.number()),
  /**
   * Set when `logprobs` are the sampler's: log-probabilities under softmax(logits ÷ temperature), restricted to
   * the tokens the tool-call constraint allowed when `constrained`. Absent: the model's log π at temperature 1
   * over the whole vocabulary. Training computes its log π the same way.
   */
  temperature: z.number().positive().optional(),
  /** The turn was decoded with tool calls constrained to the tools' schemas (src/chat/constrain.ts). */
  constrained: z.boolean().optional(),
});

export const ChatMessageSchema = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  /** Text; null only on an assistant turn that just calls tools (or one the chat core refuses, naming it). */
  content: z.string().nullable(),
  tool_calls: z.array(ToolCallSchema).optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
  /** An assistant turn's reasoning, for templates that render it; only requests to `mcprl serve` carry it. */
  reasoning_content: z.string().optional(),
  execution: ToolExecutionSchema.optional(),
  mcprl: SampledTokensSchema.optional(),
});

export type ChatMessage = z.infer<typeof ChatMessageSchema>;
export type ToolCall = z.infer<typeof ToolCallSchema>;
export type SampledTokens = z.infer<typeof SampledTokensSchema>;
