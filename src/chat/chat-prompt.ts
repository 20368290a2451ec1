/**
 * A prompt as the chat template takes it: each message with only the fields its role has (a message the
 * template cannot render is refused, naming it), whether tools are offered, and what a rendering is remembered by.
 */
import { ChatError, type ChatPrompt } from './chat-turn.js';
import type { ChatMessage } from './message.js';
import type { OpenAITool } from './tool.js';

/** Whether the prompt offers tools (then tool calls are also parsed from the answer). */
export function toolsEnabled(prompt: ChatPrompt): prompt is ChatPrompt & { tools: OpenAITool[] } {
  return !!prompt.tools && prompt.tools.length > 0;
}

/** What a prompt's ids are remembered by: the chat template's whole input. */
export function promptKey(input: { messages: ChatMessage[]; tools?: OpenAITool[]; kwargs: Record<string, unknown> }): string {
  return JSON.stringify([input.messages, input.tools ?? null, input.kwargs]);
}

/** Characters of a request's messages, tool calls and tools: what the prompt holds besides the template's own text. */
export function promptChars(prompt: ChatPrompt): number {
  let n = prompt.tools ? JSON.stringify(prompt.tools).length : 0;
  for (const m of prompt.messages) {
    if (typeof m.content === 'string') n += m.content.length;
    n += (m.reasoning_content ?? '').length;
    for (const c of m.tool_calls ?? []) n += c.function.name.length + c.function.arguments.length;
  }
  return n;
}

/** The message as the template receives it: only the fields its role has. */
export function toTemplateMessage(m: ChatMessage, i: number): ChatMessage {
  const content = m.content;
  switch (m.role) {
    case 'assistant':
      return {
        role: 'assistant',
        content,
        ...(m.tool_calls && m.tool_calls.length > 0
          ? {
              tool_calls: m.tool_calls.map((tc) => ({
                id: tc.id,
                type: 'function' as const,
                function: { name: tc.function.name, arguments: tc.function.arguments },
              })),
            }
          : {}),
        ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}),
      };
    case 'tool':
      if (content === null) throw new ChatError('INVALID_MESSAGE', `messages.${i}.content: a tool message needs content`, { param: `messages.${i}.content` });
      return { role: 'tool', content, ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}), ...(m.name ? { name: m.name } : {}) };
    default:
      if (content === null) throw new ChatError('INVALID_MESSAGE', `messages.${i}.content: a ${m.role} message needs content`, { param: `messages.${i}.content` });
      return { role: m.role, content };
  }
}
