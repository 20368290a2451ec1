/**
 * The contract between the MCP layer and everything downstream (scenarios, agent, ruler, train).
 * Implementations live beside this file; other layers import only from `src/mcp/index.ts`.
 */
import type { z } from 'zod';
import type { ToolExecutionSchema } from '../chat/message.js';

/** Where an MCP server lives. */
export type Target =
  | { kind: 'stdio'; command: string; args: string[]; env?: Record<string, string>; cwd?: string }
  | { kind: 'http'; url: string; headers?: Record<string, string> };

/** Tool annotations with the MCP spec's defaults filled in. They are untrusted hints. */
export interface ToolAnnotations {
  title?: string;
  /** Default false. */
  readOnlyHint: boolean;
  /** Default true (only meaningful when readOnlyHint is false). */
  destructiveHint: boolean;
  /** Default false. */
  idempotentHint: boolean;
  /** Default true. */
  openWorldHint: boolean;
}

/** One entry of a server's tool catalog. */
export interface ToolInfo {
  name: string;
  title?: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  annotations: ToolAnnotations;
  /**
   * The tool's `execution.taskSupport` when the server sets it: `required` tools run only as MCP tasks (SEP-1686),
   * which callTool does through the SDK's task stream (create, poll, result).
   */
  taskSupport?: 'forbidden' | 'optional' | 'required';
}

/**
 * Whether the server executed a call: `executed` (the server answered it with a result, an error result included),
 * `not_executed` (never sent, or refused by the server before it ran: an unknown tool, a safety policy refusal, a
 * cancellation before it started, invalid parameters), `unknown` (sent, but no answer came: the connection was lost,
 * the call timed out or was cancelled while it ran). Rewards count only executed calls (src/ruler/checks.ts).
 * A tool answer in the conversation carries it (src/chat/message.ts), which is where its schema lives.
 */
export type ToolExecution = z.infer<typeof ToolExecutionSchema>;

/** A tool call's result, normalised to text a model can read. Tool failures are data, not exceptions. */
export interface ToolCallOutcome {
  /** Whether the server executed the call (see ToolExecution). */
  execution: ToolExecution;
  /** Text for the model: text blocks joined, structuredContent as JSON, media summarised; capped. */
  text: string;
  /** True when the server said isError, the call timed out, the policy refused it, or output broke its schema. */
  isError: boolean;
  /** The server's structuredContent, when it sent one. */
  structuredContent?: unknown;
  /** True when `text` was cut at the output cap (a visible marker is in the text). */
  truncated: boolean;
  /** Wall time of the call in milliseconds. */
  latencyMs: number;
  /** Set when the safety policy refused the call: which options would let it run (for the operator, not the model). */
  refused?: { remedy: string };
  /** The image and audio blocks of the result, without their data (set when there is one). */
  media?: MediaBlock[];
}

/** An image or audio content block of a tool result: its kind, MIME type and size in bytes (the data is not kept). */
export interface MediaBlock {
  type: 'image' | 'audio';
  mimeType: string;
  bytes: number;
}

export interface CallToolOptions {
  /** Per-call timeout in milliseconds. Default 60000. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Output cap in characters. Default 20000. */
  maxChars?: number;
}
