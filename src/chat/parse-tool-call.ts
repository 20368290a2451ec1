/**
 * Tool calls in Qwen's Hermes form: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, any number of
 * them in one assistant message. Text outside the tags is the message's content. A block that cannot be read
 * (bad JSON, no name, no closing tag) is reported as an invalid call — the model did it, so it is data for
 * the reward, never an exception.
 *
 * `<tool_call>` inside a `<think>…</think>` block (or after a `<think>` that is never closed) is part of the
 * model's reasoning, not a call, and stays in the content.
 */

export const TOOL_CALL_OPEN = '<tool_call>';
export const TOOL_CALL_CLOSE = '</tool_call>';
const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';

export interface ParsedToolCall {
  name: string;
  /**
   * The arguments as a JSON object text, written like Python's `json.dumps` (`", "` and `": "` separators,
   * non-ASCII kept) — the form Qwen's template prints them in, and the form vLLM's Hermes parser returns.
   */
  arguments: string;
  /** The text between the tags, as the model wrote it. */
  raw: string;
}

export interface InvalidToolCall {
  /** The text between the tags (or after an unclosed `<tool_call>`), as the model wrote it. */
  raw: string;
  error: string;
}

export interface ParsedAssistantText {
  /**
   * Text outside the tool-call blocks. When the message has any `<tool_call>` tag, trailing whitespace is
   * trimmed (it separated text from the calls) and whitespace-only content is null; otherwise the text is
   * returned exactly as generated.
   */
  content: string | null;
  toolCalls: ParsedToolCall[];
  invalidToolCalls: InvalidToolCall[];
}

/** Splits generated text into content and tool calls. Never throws. */
export function parseToolCalls(text: string): ParsedAssistantText {
  const scan = scanBlocks(text, true);
  const toolCalls: ParsedToolCall[] = [];
  const invalidToolCalls: InvalidToolCall[] = [];
  for (const block of scan.blocks) {
    if (!block.closed) {
      invalidToolCalls.push({ raw: block.body, error: `unterminated ${TOOL_CALL_OPEN} (no ${TOOL_CALL_CLOSE})` });
      continue;
    }
    const parsed = parseCallBody(block.body);
    if ('error' in parsed) invalidToolCalls.push({ raw: block.body, error: parsed.error });
    else toolCalls.push({ name: parsed.name, arguments: parsed.arguments, raw: block.body });
  }
  let content: string | null = scan.outside;
  if (scan.sawTag) {
    content = content.trimEnd();
    if (content.trim() === '') content = null;
  }
  return { content, toolCalls, invalidToolCalls };
}

/**
 * The part of the content of a message still being generated that the final `parseToolCalls(text).content`
 * is certain to start with — what a stream may send now. It holds back a possible start of `<tool_call>`
 * and trailing whitespace (which is dropped if a tool call follows).
 */
export function stableContent(partialText: string): string {
  const scan = scanBlocks(partialText, false);
  return scan.outside.trimEnd();
}

interface Block {
  body: string;
  closed: boolean;
}

function scanBlocks(text: string, final: boolean): { outside: string; blocks: Block[]; sawTag: boolean } {
  let outside = '';
  const blocks: Block[] = [];
  let sawTag = false;
  let i = 0;
  let inThink = false;
  while (i < text.length) {
    if (inThink) {
      const close = text.indexOf(THINK_CLOSE, i);
      if (close < 0) {
        outside += text.slice(i);
        break;
      }
      outside += text.slice(i, close + THINK_CLOSE.length);
      i = close + THINK_CLOSE.length;
      inThink = false;
      continue;
    }
    const call = text.indexOf(TOOL_CALL_OPEN, i);
    const think = text.indexOf(THINK_OPEN, i);
    if (think >= 0 && (call < 0 || think < call)) {
      outside += text.slice(i, think + THINK_OPEN.length);
      i = think + THINK_OPEN.length;
      inThink = true;
      continue;
    }
    if (call < 0) {
      let rest = text.slice(i);
      // While text is still arriving, its tail may be the first characters of a `<tool_call>` tag.
      if (!final) rest = rest.slice(0, rest.length - partialTagLength(rest, TOOL_CALL_OPEN));
      outside += rest;
      break;
    }
    sawTag = true;
    outside += text.slice(i, call);
    const bodyStart = call + TOOL_CALL_OPEN.length;
    const close = text.indexOf(TOOL_CALL_CLOSE, bodyStart);
    if (close < 0) {
      blocks.push({ body: text.slice(bodyStart), closed: false });
      break;
    }
    blocks.push({ body: text.slice(bodyStart, close), closed: true });
    i = close + TOOL_CALL_CLOSE.length;
  }
  return { outside, blocks, sawTag };
}

/** Length of the longest suffix of `s` that is a proper prefix of `tag`. */
export function partialTagLength(s: string, tag: string): number {
  for (let k = Math.min(tag.length - 1, s.length); k > 0; k--) {
    if (s.endsWith(tag.slice(0, k))) return k;
  }
  return 0;
}

function parseCallBody(body: string): { name: string; arguments: string } | { error: string } {
  let value: unknown;
  try {
    value = JSON.parse(body.trim());
  } catch (err) {
    return { error: `tool call is not valid JSON: ${(err as Error).message}` };
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    return { error: 'tool call must be a JSON object {"name": ..., "arguments": {...}}' };
  }
  const obj = value as Record<string, unknown>;
  if (typeof obj.name !== 'string' || obj.name.trim() === '') {
    return { error: 'tool call has no "name" string' };
  }
  // Some models write `parameters` (Llama's convention) instead of `arguments`.
  let args = obj.arguments !== undefined ? obj.arguments : obj.parameters;
  if (args === undefined || args === null) args = {};
  if (typeof args === 'string') {
    // A JSON object written as a string is a common slip; it is unambiguous, so accept it.
    try {
      args = JSON.parse(args);
    } catch {
      return { error: '"arguments" is a string that is not a JSON object' };
    }
  }
  if (!args || typeof args !== 'object' || Array.isArray(args)) {
    return { error: '"arguments" must be a JSON object' };
  }
  return { name: obj.name, arguments: pythonJsonDumps(args) };
}

/**
 * JSON text as Python's `json.dumps(value, ensure_ascii=False)` writes it (and jinja's `tojson`): `", "`
 * between items and `": "` after keys.
 */
export function pythonJsonDumps(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(', ')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}: ${pythonJsonDumps(v)}`).join(', ')}}`;
  }
  return JSON.stringify(value);
}
