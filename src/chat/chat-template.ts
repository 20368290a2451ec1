/**
 * Renders a model's own chat template (the Jinja source in its tokenizer_config.json) with
 * `@huggingface/jinja`, the way transformers' `apply_chat_template` does. mcprl never imitates a template
 * by hand: whatever the model was trained with is what it sees.
 */
import { Template } from '@huggingface/jinja';
import type { HfTokenizer } from './tokenizer.js';
import type { ChatMessage } from './message.js';
import type { OpenAITool } from './tool.js';
import { McprlError } from '../util/errors.js';

export interface RenderOptions {
  /** Tools offered to the model; omitted or empty means none (the template then leaves out its tool prompt). */
  tools?: readonly OpenAITool[];
  /** End with the header of a new assistant turn. Default true. */
  addGenerationPrompt?: boolean;
  /**
   * Extra template variables, passed as transformers' `apply_chat_template(**kwargs)` would, e.g.
   * `{ enable_thinking: false }` for Qwen3. Default none.
   */
  kwargs?: Record<string, unknown>;
}

export type ChatTemplateErrorCode = 'NO_CHAT_TEMPLATE' | 'TEMPLATE_SYNTAX' | 'TEMPLATE_RENDER';

/**
 * The template is missing or broken, or refused the conversation (templates call `raise_exception`, e.g.
 * when roles do not alternate). TEMPLATE_RENDER is usually the request's fault.
 */
export class ChatTemplateError extends McprlError<ChatTemplateErrorCode> {}

export class ChatTemplate {
  private readonly template: Template;
  private readonly toolTemplate: Template | null;
  private readonly specialTokens: Record<string, string | null>;
  /**
   * The text depends on the render's input alone: the template never reads the clock (`strftime_now`, which
   * Llama 3's templates call for today's date), so a rendering may be remembered.
   */
  readonly pure: boolean;

  /**
   * @param source the Jinja source of the template.
   * @param specialTokens token strings the template may read (`bos_token`, `eos_token`, …).
   * @param toolUseSource an alternative template used when tools are present (tokenizer_config.json's named
   *   `tool_use` template), if the model has one.
   */
  constructor(source: string, specialTokens: Record<string, string | null> = {}, toolUseSource: string | null = null) {
    try {
      this.template = new Template(source);
      this.toolTemplate = toolUseSource ? new Template(toolUseSource) : null;
    } catch (err) {
      throw new ChatTemplateError('TEMPLATE_SYNTAX', `chat template does not parse: ${(err as Error).message}`, {
        cause: err,
      });
    }
    this.specialTokens = specialTokens;
    this.pure = ![source, toolUseSource ?? ''].some((t) => t.includes('strftime_now'));
  }

  /** The template of a model folder's tokenizer. */
  static fromTokenizer(tok: HfTokenizer): ChatTemplate {
    if (!tok.chatTemplate) {
      throw new ChatTemplateError('NO_CHAT_TEMPLATE', 'the tokenizer has no chat_template (tokenizer_config.json)');
    }
    return new ChatTemplate(
      tok.chatTemplate,
      { bos_token: tok.bosToken, eos_token: tok.eosToken, pad_token: tok.padToken, unk_token: tok.unkToken },
      tok.toolUseChatTemplate,
    );
  }

  render(messages: readonly ChatMessage[], opts: RenderOptions = {}): string {
    const tools = opts.tools && opts.tools.length > 0 ? opts.tools : undefined;
    const template = tools && this.toolTemplate ? this.toolTemplate : this.template;
    const context: Record<string, unknown> = {
      ...Object.fromEntries(Object.entries(this.specialTokens).filter(([, v]) => v !== null)),
      ...opts.kwargs,
      messages: messages.map(toJinjaMessage),
      add_generation_prompt: opts.addGenerationPrompt ?? true,
    };
    if (tools) context.tools = tools.map((t) => structuredClone(t));
    try {
      return template.render(context);
    } catch (err) {
      // Name the tools whose schema the template cannot render (each tried alone), rather than quote the template
      // engine's own words (`Unknown NumericValue filter: items`) about a value nobody can find.
      const rendersWithout = (() => {
        try {
          template.render({ ...context, tools: [] });
          return true;
        } catch {
          return false;
        }
      })();
      const culprits = (rendersWithout ? (tools ?? []) : []).flatMap((t) => {
        try {
          template.render({ ...context, tools: [structuredClone(t)] });
          return [];
        } catch (e) {
          return [`tool ${JSON.stringify(toolName(t))}: ${(e as Error).message}`];
        }
      });
      const what = culprits.length > 0
        ? `the model's chat template cannot render the schema of ${culprits.join('; ')} (a value of a type the template does not expect there); change or leave out that tool`
        : `chat template refused the conversation: ${(err as Error).message}`;
      throw new ChatTemplateError('TEMPLATE_RENDER', what, { cause: err });
    }
  }
}

/**
 * What templates expect rather than what OpenAI clients send: string content (templates call string methods
 * on it, so null becomes ''), and tool-call arguments as objects, which templates print with `tojson` — the
 * same normalisation vLLM applies, so a parsed tool call renders back in the model's canonical form.
 * Fields a template does not know (mcprl's token ids) are dropped.
 */
function toJinjaMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content ?? '' };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((tc) => ({
      ...(tc.id !== undefined ? { id: tc.id } : {}),
      type: 'function',
      function: { name: tc.function.name, arguments: argumentsForTemplate(tc.function.arguments) },
    }));
  }
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  if (m.reasoning_content !== undefined) out.reasoning_content = m.reasoning_content;
  return out;
}

function argumentsForTemplate(args: string): string | Record<string, unknown> {
  try {
    const parsed = JSON.parse(args);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed;
  } catch {
    // Not JSON: the template prints the string as it is.
  }
  return args;
}

/** A tool's name in OpenAI's shape (`{type, function: {name}}`) or a bare `{name}`. */
function toolName(t: unknown): string {
  const o = t as { function?: { name?: unknown }; name?: unknown };
  return String(o.function?.name ?? o.name ?? '(unnamed)');
}
