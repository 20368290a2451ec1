/**
 * Which constraint a chat turn decodes under (its tool choice, parallel_tool_calls and response format, else the
 * engine's constrainToolCalls), and the compiled constrainers, kept per tool list or schema because compiling
 * one walks the whole vocabulary.
 */
import { ChatError, type ChatTurnRequest } from './chat-turn.js';
import { ToolCallConstrainer, type TokenTable } from './constrain.js';
import { UnsupportedSchema } from './json-schema-grammar.js';
import { compileJsonGrammar, type ToolCallOptions } from './tool-call-grammar.js';
import type { OpenAITool } from './tool.js';

/** A tool as constraints read it: its name and input schema. */
export type ConstrainedTool = { type?: string; function: { name: string; parameters?: unknown } };

export type ResponseFormat = NonNullable<ChatTurnRequest['responseFormat']>;

/** The two constrainers a request may ask for (the chat engine's, so that a subclass may change them). */
export interface Constrainers {
  toolCallConstrainer(tools: readonly ConstrainedTool[], opts?: ToolCallOptions): ToolCallConstrainer;
  responseFormatConstrainer(format: ResponseFormat, tools?: readonly ConstrainedTool[], opts?: ToolCallOptions): ToolCallConstrainer;
}

/** The 16 constrainers last compiled, by what they were compiled from. */
export class ConstrainerCache {
  private readonly byKey = new Map<string, ToolCallConstrainer>();

  /** `table`: the tokenizer's token table, built for each constrainer compiled. */
  constructor(private readonly table: () => TokenTable) {}

  toolCalls(tools: readonly ConstrainedTool[], opts: ToolCallOptions): ToolCallConstrainer {
    const list = tools.map((t) => ({ name: t.function.name, parameters: t.function.parameters }));
    const o = { require: opts.require === true, single: opts.single === true };
    return this.cached(JSON.stringify([list, o.require, o.single]), (table) => new ToolCallConstrainer(table, list, o));
  }

  /** Throws ChatError (INVALID_REQUEST, param `response_format`) for a schema the grammar cannot enforce. */
  responseFormat(format: ResponseFormat, tools: readonly ConstrainedTool[], opts: ToolCallOptions): ToolCallConstrainer {
    const schema = format.type === 'json_object' ? { type: 'object' } : format.schema;
    const list = tools.map((t) => ({ name: t.function.name, parameters: t.function.parameters }));
    const o = { require: opts.require === true, single: opts.single === true };
    return this.cached(JSON.stringify(['json', schema, list, o.require, o.single]), (table) => {
      try {
        return new ToolCallConstrainer(table, compileJsonGrammar(schema, list, o));
      } catch (err) {
        if (!(err instanceof UnsupportedSchema)) throw err;
        throw new ChatError('INVALID_REQUEST', `response_format.json_schema.schema: ${err.message} cannot be enforced`, { param: 'response_format', cause: err });
      }
    });
  }

  private cached(key: string, make: (table: TokenTable) => ToolCallConstrainer): ToolCallConstrainer {
    let c = this.byKey.get(key);
    if (!c) {
      c = make(this.table());
      if (this.byKey.size >= 16) this.byKey.delete(this.byKey.keys().next().value!);
      this.byKey.set(key, c);
    }
    return c;
  }
}

/**
 * The constraint a request decodes under, or null: its tool choice and response format, else `constrainByDefault`
 * (the engine's constrainToolCalls) unless the request says otherwise.
 */
export function requestConstrainer(req: ChatTurnRequest, c: Constrainers, constrainByDefault: boolean): ToolCallConstrainer | null {
  const choice = req.toolChoice ?? 'auto';
  if (!req.tools || req.tools.length === 0) {
    if (choice !== 'auto') throw new ChatError('INVALID_REQUEST', 'tool_choice: a tool call cannot be required without tools', { param: 'tool_choice' });
    return req.responseFormat ? c.responseFormatConstrainer(req.responseFormat) : null;
  }
  const single = req.parallelToolCalls === false;
  let tools: readonly OpenAITool[] = req.tools;
  if (typeof choice === 'object') {
    tools = tools.filter((t) => t.function.name === choice.name);
    if (tools.length === 0) throw new ChatError('INVALID_REQUEST', `tool_choice: no tool is named ${JSON.stringify(choice.name)}`, { param: 'tool_choice' });
  }
  const opts = { require: choice !== 'auto', single };
  // Tools and a response format: the turn is calls, or the answer in that format.
  if (req.responseFormat) return c.responseFormatConstrainer(req.responseFormat, tools, opts);
  if (choice === 'auto' && !single) return (req.constrainToolCalls ?? constrainByDefault) ? c.toolCallConstrainer(req.tools) : null;
  return c.toolCallConstrainer(tools, opts);
}
