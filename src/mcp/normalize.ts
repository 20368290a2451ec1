import { isDeepStrictEqual } from 'node:util';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { MediaBlock } from './types.js';

/** Default output cap for one tool result, in characters. */
export const DEFAULT_MAX_OUTPUT_CHARS = 20_000;

/** Bytes encoded by a base64 string (without decoding it). */
function base64Bytes(b64: string): number {
  const s = b64.replace(/\s/g, '');
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((s.length * 3) / 4) - pad);
}

function tryParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

type ContentBlock = CallToolResult['content'][number];

function blockToText(block: ContentBlock): string {
  switch (block.type) {
    case 'text':
      return block.text;
    case 'image':
      return `[image: ${block.mimeType}, ${base64Bytes(block.data)} bytes]`;
    case 'audio':
      return `[audio: ${block.mimeType}, ${base64Bytes(block.data)} bytes]`;
    case 'resource_link':
      return `[resource link: ${block.uri}${block.name ? ` (${block.name})` : ''}${block.mimeType ? `, ${block.mimeType}` : ''}]`;
    case 'resource': {
      const r = block.resource;
      const mime = r.mimeType ? `, ${r.mimeType}` : '';
      // Embedded text is what the model needs to read; only binary blobs are reduced to a summary.
      if ('text' in r && typeof r.text === 'string') return `[resource: ${r.uri}${mime}, ${r.text.length} chars]\n${r.text}`;
      if ('blob' in r && typeof r.blob === 'string') return `[resource: ${r.uri}${mime}, ${base64Bytes(r.blob)} bytes]`;
      return `[resource: ${r.uri}${mime}]`;
    }
    default:
      return `[${(block as { type: string }).type} content]`;
  }
}

/**
 * Turns a tool result into the text a model reads: text blocks joined with newlines, media summarised by type
 * and size, and structuredContent as JSON unless a text block already carries the same value (servers are
 * asked to mirror it there for older clients; repeating it would double the tokens).
 */
export function resultToText(result: CallToolResult): string {
  const content = result.content ?? [];
  const parts = content.map(blockToText);
  const sc = result.structuredContent;
  if (sc !== undefined) {
    const mirrored = content.some((b) => b.type === 'text' && isDeepStrictEqual(tryParse(b.text), sc));
    if (!mirrored) parts.push(JSON.stringify(sc));
  }
  return parts.join('\n');
}

/** The image and audio blocks of a tool result: MIME type and size, in order. */
export function mediaBlocks(result: CallToolResult): MediaBlock[] {
  return (result.content ?? []).flatMap((b): MediaBlock[] => (b.type === 'image' || b.type === 'audio' ? [{ type: b.type, mimeType: b.mimeType, bytes: base64Bytes(b.data) }] : []));
}

/** Cuts `text` to `maxChars` characters and appends a visible marker saying how much was cut. */
export function capText(text: string, maxChars: number): { text: string; truncated: boolean } {
  if (text.length <= maxChars) return { text, truncated: false };
  const marker = `\n…[output truncated by mcprl: showing ${maxChars} of ${text.length} characters]`;
  return { text: text.slice(0, maxChars) + marker, truncated: true };
}
