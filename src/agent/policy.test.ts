import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { chatReply, startOpenAIDouble } from '../../test/doubles/openai-double.js';
import { OpenAIPolicy, parseCompletion } from './policy.js';
import { rollout } from './rollout.js';

/** A chat completion as vLLM writes it (no mcprl extension fields). */
function vllmCompletion(choice: Record<string, unknown>): OpenAI.Chat.Completions.ChatCompletion {
  return { id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: 'policy-step-1', choices: [{ index: 0, finish_reason: 'stop', logprobs: null, ...choice }] } as unknown as OpenAI.Chat.Completions.ChatCompletion;
}

describe('parseCompletion on vLLM answers', () => {
  it('reads an unreadable <tool_call> left in content as an invalid call (its parse error goes back to the model)', () => {
    const turn = parseCompletion(vllmCompletion({ message: { role: 'assistant', content: 'Let me look.\n<tool_call>{"name": "search", "arguments": {"q": </tool_call>' } }));
    expect(turn.toolCalls).toEqual([]);
    expect(turn.invalidToolCalls).toHaveLength(1);
    expect(turn.invalidToolCalls![0].raw).toContain('"name": "search"');
    expect(turn.content).toBe('Let me look.');
  });

  it('reads the readable blocks of such content as calls, as the in-process policy does', () => {
    const turn = parseCompletion(vllmCompletion({ message: { role: 'assistant', content: '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>oops</tool_call>' } }));
    expect(turn.toolCalls.map((c) => c.name)).toEqual(['a']);
    expect(turn.invalidToolCalls).toHaveLength(1);
    expect(turn.content).toBeNull();
  });

  it('leaves plain content alone', () => {
    const turn = parseCompletion(vllmCompletion({ message: { role: 'assistant', content: 'The answer is 4.' } }));
    expect(turn).toMatchObject({ content: 'The answer is 4.', toolCalls: [] });
    expect(turn.invalidToolCalls).toBeUndefined();
  });

  it('takes token ids from return_token_ids, else from token_id:N logprob entries', () => {
    const lp = { content: [{ token: 'token_id:5', logprob: -0.5, bytes: [], top_logprobs: [] }, { token: 'token_id:9', logprob: -1, bytes: [], top_logprobs: [] }] };
    const withIds = parseCompletion(vllmCompletion({ message: { role: 'assistant', content: 'hi' }, logprobs: lp, token_ids: [5, 9] }));
    expect(withIds).toMatchObject({ tokenIds: [5, 9], logprobs: [-0.5, -1] });
    const fromNames = parseCompletion(vllmCompletion({ message: { role: 'assistant', content: 'hi' }, logprobs: lp }));
    expect(fromNames.tokenIds).toEqual([5, 9]);
    const textTokens = parseCompletion(vllmCompletion({ message: { role: 'assistant', content: 'hi' }, logprobs: { content: [{ token: 'hi', logprob: -0.1, bytes: [], top_logprobs: [] }] } }));
    expect(textTokens.tokenIds).toBeUndefined();
  });
});

// The double stands in for a remote OpenAI-compatible endpoint, which cannot run here.
describe('a policy samples as it was made to', () => {
  it('sends its own temperature and max_tokens on every turn; the rollout loop sends none', async () => {
    const llm = await startOpenAIDouble([chatReply('The answer is 4.'), chatReply('Hello.')]);
    try {
      const policy = new OpenAIPolicy({ baseURL: llm.baseURL, model: 'm', temperature: 0.3, maxTokens: 12, maxRetries: 0 });
      const session = { callTool: () => Promise.reject(new Error('no tool is called')) };
      const t = await rollout({ policy, session, tools: [], scenario: { id: 's', task: 'What is 2 + 2?', difficulty: 1, source: 'llm' }, seed: 3 });
      expect(t.error).toBeUndefined();
      expect(llm.requests.map((r) => [r.body.temperature, r.body.max_tokens, r.body.seed])).toEqual([[0.3, 12, 3]]);
      // Made without them, it leaves both to the endpoint.
      await new OpenAIPolicy({ baseURL: llm.baseURL, model: 'm', maxRetries: 0 }).next({ messages: [{ role: 'user', content: 'hi' }], tools: [] });
      expect(llm.requests[1].body).not.toHaveProperty('temperature');
      expect(llm.requests[1].body).not.toHaveProperty('max_tokens');
    } finally {
      await llm.close();
    }
  });
});
