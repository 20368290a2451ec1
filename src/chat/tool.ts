/**
 * The one shape of a tool offered to the model: OpenAI's `{type: 'function', function: {...}}`. MCP tools are
 * converted to it (src/mcp/openai-tools.ts), trajectories keep it (the MCP rollout's and the library's), the chat
 * template renders it, and `mcprl serve` parses requests' tools with it. `description` and `parameters` are
 * optional because OpenAI's clients may leave them out; a tool converted from MCP always has both. The template is
 * given the tool as parsed, so what a client sends (`strict` included) is what the model is shown.
 */
import { z } from 'zod';

export const OpenAIToolSchema = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().min(1),
    description: z.string().optional(),
    /** The arguments' JSON Schema. */
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});

export type OpenAITool = z.infer<typeof OpenAIToolSchema>;
