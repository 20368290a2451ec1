/**
 * One tool shape (src/chat/tool.ts): what `mcprl serve` parses from a request, what the chat core renders, and
 * what the MCP rollout's and the library's trajectories keep are the same object.
 */
import { describe, expect, it } from 'vitest';
import { McpTrajectorySchema } from '../src/agent/trajectory.js';
import { TrajectorySchema } from '../src/backend/schemas.js';
import { OpenAIToolSchema } from '../src/chat/tool.js';
import { toOpenAITools } from '../src/mcp/openai-tools.js';
import { parseChatRequest, toTurnRequest } from '../src/serve/openai-chat.js';

// A tool as an OpenAI client may send it: no description, `strict` set.
const sent = { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } }, strict: true } };
const messages = [{ role: 'user' as const, content: 'find it' }];
const mcpTrajectory = (tools: unknown[]) => ({
  id: 't', scenario_id: 's', messages, tools, final_answer: null, reward: 0, reward_components: {}, logs: [],
  metrics: { turns: 0, tool_calls: 0, tool_errors: 0, invalid_calls: 0, completed: false, ran_out_of_turns: false, latency_ms: 0 },
});

describe('the tool shape', () => {
  it('is the same wherever a tool is read', () => {
    const canonical = OpenAIToolSchema.parse(sent);
    expect(canonical).toEqual(sent);
    const served = toTurnRequest(parseChatRequest({ model: 'm', messages, tools: [sent] })).tools;
    expect(served).toEqual([canonical]);
    expect(TrajectorySchema.parse({ messages, tools: [sent], reward: 1 }).tools).toEqual([canonical]);
    expect(McpTrajectorySchema.parse(mcpTrajectory([sent])).tools).toEqual([canonical]);
  });

  it('is what an MCP tool converts to, and a nameless tool is refused everywhere', () => {
    const [converted] = toOpenAITools([{ name: 'lookup', description: 'Look it up', inputSchema: { type: 'object' } } as never]);
    expect(OpenAIToolSchema.parse(converted)).toEqual(converted);
    const nameless = { type: 'function', function: { name: '' } };
    expect(() => parseChatRequest({ model: 'm', messages, tools: [nameless] })).toThrow(/tools\.0\.function\.name/);
    expect(TrajectorySchema.safeParse({ messages, tools: [nameless], reward: 1 }).success).toBe(false);
    expect(McpTrajectorySchema.safeParse(mcpTrajectory([nameless])).success).toBe(false);
  });
});
