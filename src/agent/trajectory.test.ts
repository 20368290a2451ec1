import { describe, expect, it } from 'vitest';
import { McpTrajectorySchema, wasExecuted } from './trajectory.js';

describe('wasExecuted', () => {
  it('follows a tool answer\'s execution when it has one', () => {
    expect(wasExecuted({ content: 'ok', execution: 'executed' })).toBe(true);
    expect(wasExecuted({ content: 'Error: the book does not exist', execution: 'executed' })).toBe(true);
    expect(wasExecuted({ content: 'ok', execution: 'not_executed' })).toBe(false);
    expect(wasExecuted({ content: 'ok', execution: 'unknown' })).toBe(false);
  });

  it('reads answers recorded without one: the loop\'s not-executed answers and the session\'s unknown tools and lost connections do not count', () => {
    expect(wasExecuted({ content: '{"id": "bk-001"}' })).toBe(true);
    expect(wasExecuted({ content: 'Error: no book bk-999' })).toBe(true);
    expect(wasExecuted({ content: 'Error: invalid tool call. Unknown tool "x".' })).toBe(false);
    expect(wasExecuted({ content: 'Not executed: complete_task was already called in this turn.' })).toBe(false);
    expect(wasExecuted({ content: "Error: Unknown tool 'get_book'. This server's tools are: list_branches." })).toBe(false);
    expect(wasExecuted({ content: "Error: Tool 'crash' failed: the connection to the server was lost during the call (closed); it is not known whether the tool ran." })).toBe(false);
  });
});

describe('TrajectorySchema', () => {
  // A trajectory as the rollout loop writes it (trajectories/step-NNNN.jsonl): every message field it uses.
  const saved = {
    id: 't1',
    scenario_id: 's1',
    group_id: 'g1',
    messages: [
      { role: 'system', content: 'You are an agent.' },
      { role: 'user', content: 'Find book bk-1.' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_book', arguments: '{"id":"bk-1"}' } }],
        mcprl: { token_ids: [1, 2, 3], logprobs: [-0.5, -0.25, -1], temperature: 0.7, constrained: true },
      },
      { role: 'tool', content: '{"title":"Dune"}', tool_call_id: 'call_0', name: 'get_book', execution: 'executed' },
      { role: 'assistant', content: 'Dune.', mcprl: { token_ids: [4], logprobs: [-0.1] } },
    ],
    tools: [{ type: 'function', function: { name: 'get_book', description: 'A book', parameters: { type: 'object' } } }],
    final_answer: 'Dune.',
    reward: 1,
    reward_components: { checks: 1 },
    metrics: { turns: 2, tool_calls: 1, tool_errors: 0, invalid_calls: 0, completed: true, ran_out_of_turns: false, latency_ms: 12 },
    logs: [],
  };

  it('reads a saved trajectory back exactly as it was written', () => {
    expect(JSON.stringify(McpTrajectorySchema.parse(JSON.parse(JSON.stringify(saved))))).toBe(JSON.stringify(saved));
  });

  it('still requires an id on every tool call and keeps no reasoning_content', () => {
    const call = { type: 'function', function: { name: 'get_book', arguments: '{}' } };
    const noId = { ...saved, messages: [{ role: 'assistant', content: null, tool_calls: [call] }] };
    const r = McpTrajectorySchema.safeParse(noId);
    expect(r.success).toBe(false);
    expect(r.error?.issues[0].path).toEqual(['messages', 0, 'tool_calls', 0, 'id']);
    const reasoning = { ...saved, messages: [{ role: 'assistant', content: 'Dune.', reasoning_content: 'thought' }] };
    expect(McpTrajectorySchema.parse(reasoning).messages[0]).toStrictEqual({ role: 'assistant', content: 'Dune.' });
  });
});
