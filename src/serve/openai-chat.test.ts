/** OpenAI's chat request onto the typed chat core, and the core's refusals back as OpenAI errors. */
import { describe, expect, it } from 'vitest';
import { ChatError } from '../chat/chat-engine.js';
import { Template } from '@huggingface/jinja';
import { qwen3TokenizerDir } from '../../scripts/random-model.js';
import { ChatTemplate } from '../chat/chat-template.js';
import { ChatMessageSchema } from '../chat/message.js';
import { HfTokenizer } from '../chat/tokenizer.js';
import { ChatRequestError, parseChatRequest, toRequestError, toTurnRequest } from './openai-chat.js';

const messages = [{ role: 'user', content: 'Write anything.' }];
const refusal = (body: unknown) => {
  try {
    parseChatRequest(body);
  } catch (err) {
    return err;
  }
  throw new Error('parseChatRequest accepted the body');
};

describe('parseChatRequest', () => {
  it('rejects invalid requests with ChatRequestError (400) naming the field', () => {
    expect(refusal(null)).toMatchObject({ status: 400 });
    expect(refusal({ model: 'm', messages: [{ role: 'robot', content: 'x' }] })).toMatchObject({ status: 400, param: 'messages.0.role' });
    expect(refusal({ model: 'm', messages, tool_choice: { type: 'function', function: {} } })).toMatchObject({ status: 400, param: 'tool_choice' });
    expect(refusal({ model: 'm', messages, response_format: { type: 'json_schema' } })).toMatchObject({ status: 400, param: 'response_format.json_schema' });
    // Fields the server would not apply are refused by name, unless they change nothing.
    expect(refusal({ model: 'm', messages, guided_json: {} })).toMatchObject({ status: 400, param: 'guided_json', code: 'unsupported_parameter' });
    expect(refusal({ model: 'm', messages, constructor: 1 })).toMatchObject({ status: 400, param: 'constructor' });
    expect(refusal({ model: 'm', messages, frequency_penalty: 1 })).toMatchObject({ status: 400, param: 'frequency_penalty' });
    expect(parseChatRequest({ model: 'm', messages, frequency_penalty: 0, user: 'u', stream_options: null })).toMatchObject({ model: 'm' });
    expect(refusal({ model: 'm', messages, mcprl_sampler_logprobs: true, tool_choice: 'required' })).toMatchObject({ status: 400, param: 'tool_choice' });
    expect(refusal({ model: 'm', messages, mcprl_sampler_logprobs: true, response_format: { type: 'json_object' } })).toMatchObject({ status: 400, param: 'response_format' });
    expect(refusal({ model: 'm', messages, top_logprobs: 2 })).toMatchObject({ status: 400, param: 'top_logprobs' });
    expect(refusal({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] })).toBeInstanceOf(
      ChatRequestError,
    );
  });
});

describe('toTurnRequest', () => {
  it('maps OpenAI fields onto the chat core: developer is system, text parts join, tool_choice none hides the tools', () => {
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
    const turn = toTurnRequest(
      parseChatRequest({
        model: 'agent',
        messages: [
          { role: 'developer', content: 'Be brief.' },
          { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
        ],
        tools,
        stop: 'END',
        max_tokens: 7,
        max_completion_tokens: 5,
        top_k: -1,
        seed: 3,
        chat_template_kwargs: { enable_thinking: false },
      }),
    );
    expect(turn).toEqual({
      model: 'agent',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'ab' },
      ],
      tools,
      chatTemplateKwargs: { enable_thinking: false },
      sampling: { topK: -1, maxTokens: 5, stop: ['END'], seed: 3 },
    });
    expect(toTurnRequest(parseChatRequest({ model: 'm', messages, tools, tool_choice: 'none' })).tools).toBeUndefined();
  });
});

describe('chatMessageSchema', () => {
  it('converts the looser shapes clients send to the one chat message shape', () => {
    const turn = toTurnRequest(
      parseChatRequest({
        model: 'm',
        messages: [
          { role: 'user', content: 'Weather?', name: 'ann' },
          {
            role: 'assistant',
            content: null,
            name: 'bot',
            reasoning_content: null,
            tool_calls: [
              { id: 'c1', type: 'function', function: { name: 'weather', arguments: { city: 'Paris' } } },
              { function: { name: 'weather', arguments: '{"city": "Köln"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c1', name: 'weather', content: [{ type: 'text', text: 'sunny' }] },
          { role: 'assistant', content: 'Sunny.', tool_calls: null, reasoning_content: 'It said sunny.' },
        ],
      }),
    );
    expect(turn.messages).toStrictEqual([
      { role: 'user', content: 'Weather?', name: 'ann' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          // No id was sent, so the template is given none.
          { type: 'function', function: { name: 'weather', arguments: '{"city": "Köln"}' } },
        ],
      },
      { role: 'tool', content: 'sunny', tool_call_id: 'c1', name: 'weather' },
      { role: 'assistant', content: 'Sunny.', reasoning_content: 'It said sunny.' },
    ]);
    expect(() => ChatMessageSchema.array().parse(turn.messages)).not.toThrow();
  });
});

describe('tool-call arguments sent as an object', () => {
  it('render as the template renders that object itself, though the message keeps them as JSON text', async () => {
    const tokenizer = await HfTokenizer.load(qwen3TokenizerDir());
    const source = tokenizer.chatTemplate!;
    const args = { city: 'Köln', days: 3, units: { temp: 'C' }, alerts: [true, null] };
    const tools = [{ type: 'function' as const, function: { name: 'weather', parameters: { type: 'object' } } }];
    const body = {
      model: 'm',
      tools,
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: args } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'rain' },
      ],
    };
    const rendered = new ChatTemplate(source).render(toTurnRequest(parseChatRequest(body)).messages, { tools });
    // What the template is given when the object goes to it as sent (content null as '', as templates expect).
    const direct = new Template(source).render({
      messages: body.messages.map((m) => ({ ...m, content: m.content ?? '' })),
      tools,
      add_generation_prompt: true,
    });
    expect(rendered).toBe(direct);
    expect(rendered).toContain('"arguments": {"city": "Köln", "days": 3, "units": {"temp": "C"}, "alerts": [true, null]}');
  });
});

describe('toRequestError', () => {
  it("answers the core's refusals with their status and OpenAI's code; other errors pass through", () => {
    expect(toRequestError(new ChatError('MODEL_NOT_FOUND', 'no such model', { param: 'model' }))).toMatchObject({
      status: 404,
      code: 'model_not_found',
      param: 'model',
      type: 'invalid_request_error',
    });
    expect(toRequestError(new ChatError('CONTEXT_LENGTH_EXCEEDED', 'too long', { param: 'messages' }))).toMatchObject({
      status: 400,
      code: 'context_length_exceeded',
    });
    expect(toRequestError(new ChatError('TEMPLATE_RENDER', 'roles must alternate', { param: 'messages' }))).toMatchObject({ status: 400, code: null });
    const other = new Error('engine crashed');
    expect(toRequestError(other)).toBe(other);
  });
});
