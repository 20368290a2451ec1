/**
 * The tokenizer of a Hugging Face model folder: `tokenizer.json` run by `@huggingface/tokenizers`, with the
 * special tokens and chat template from `tokenizer_config.json` (or a separate `chat_template.jinja`, the
 * layout newer transformers versions write).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { McprlError } from '../util/errors.js';
import { OffThreadTokenizer, type OffThreadEncodeOptions, type TokenizerFiles } from './tokenize-off-thread.js';

export type TokenizerErrorCode = 'TOKENIZER_NOT_FOUND' | 'TOKENIZER_INVALID';

/** A token string from tokenizer_config.json: either a plain string or an AddedToken-shaped object. */
function tokenString(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') {
    return (v as { content: string }).content;
  }
  return null;
}

/** Reads a chat template out of tokenizer_config.json, where it may be one string or a list of named ones. */
function pickChatTemplate(raw: unknown): { default: string | null; toolUse: string | null } {
  if (typeof raw === 'string') return { default: raw, toolUse: null };
  if (Array.isArray(raw)) {
    const byName = new Map<string, string>();
    for (const t of raw) {
      if (t && typeof t.name === 'string' && typeof t.template === 'string') byName.set(t.name, t.template);
    }
    return { default: byName.get('default') ?? null, toolUse: byName.get('tool_use') ?? null };
  }
  return { default: null, toolUse: null };
}

export interface DecodeOptions {
  /** Drop special tokens (e.g. `<|im_end|>`) from the text. Default false. */
  skipSpecialTokens?: boolean;
}

/** A model's tokenizer plus the metadata chat needs. */
export class HfTokenizer {
  /** Token strings for the chat template's context (`bos_token`, `eos_token`, …); null where unset. */
  readonly bosToken: string | null;
  readonly eosToken: string | null;
  readonly padToken: string | null;
  readonly unkToken: string | null;
  /** The default chat template, or null when the folder has none. */
  readonly chatTemplate: string | null;
  /** A separate template for requests with tools, when tokenizer_config.json names one `tool_use`. */
  readonly toolUseChatTemplate: string | null;
  /** Ids of the tokens marked special (stripped from completion text). */
  readonly specialTokenIds: ReadonlySet<number>;
  /** Number of ids the tokenizer knows (base vocabulary plus added tokens). */
  readonly size: number;
  private readonly tok: Tokenizer;
  private readonly byteLevel: boolean;
  /** Characters in the longest token: text of N characters takes at least N / maxTokenChars tokens. */
  readonly maxTokenChars: number;
  private byteDecoder: Map<string, number> | null = null;
  private readonly files: TokenizerFiles;
  private offThread: OffThreadTokenizer | null = null;

  private constructor(tokenizerJson: Record<string, any>, config: Record<string, any>, template: string | null, files: TokenizerFiles) {
    this.files = files;
    this.tok = new Tokenizer(tokenizerJson, config);
    this.bosToken = tokenString(config.bos_token);
    this.eosToken = tokenString(config.eos_token);
    this.padToken = tokenString(config.pad_token);
    this.unkToken = tokenString(config.unk_token);
    const picked = pickChatTemplate(config.chat_template);
    this.chatTemplate = template ?? picked.default;
    this.toolUseChatTemplate = picked.toolUse;
    const special = new Set<number>();
    for (const t of (tokenizerJson.added_tokens ?? []) as { id: number; special?: boolean }[]) {
      if (t.special) special.add(t.id);
    }
    this.specialTokenIds = special;
    const vocab = this.tok.get_vocab(true);
    this.size = vocab.size;
    // A token's text (byte-level BPE: one character per byte) is never shorter than what it decodes to.
    let longest = 1;
    for (const token of vocab.keys()) longest = Math.max(longest, token.length);
    this.maxTokenChars = longest;
    const dec = tokenizerJson.decoder as { type?: string } | null | undefined;
    this.byteLevel = dec?.type === 'ByteLevel';
  }

  /** Loads `tokenizer.json` + `tokenizer_config.json` (and `chat_template.jinja` when present) from `dir`. */
  static async load(dir: string): Promise<HfTokenizer> {
    const read = async (name: string, required: boolean): Promise<Record<string, any> | null> => {
      const path = join(dir, name);
      if (!existsSync(path)) {
        if (required) throw new McprlError<TokenizerErrorCode>('TOKENIZER_NOT_FOUND', `${path} not found`);
        return null;
      }
      try {
        return JSON.parse(await readFile(path, 'utf8'));
      } catch (err) {
        throw new McprlError<TokenizerErrorCode>('TOKENIZER_INVALID', `${path}: ${(err as Error).message}`, { cause: err });
      }
    };
    const tokenizerJson = (await read('tokenizer.json', true))!;
    const configJson = await read('tokenizer_config.json', false);
    const jinjaPath = join(dir, 'chat_template.jinja');
    const template = existsSync(jinjaPath) ? await readFile(jinjaPath, 'utf8') : null;
    const files = { tokenizerJson: join(dir, 'tokenizer.json'), tokenizerConfig: configJson ? join(dir, 'tokenizer_config.json') : null };
    try {
      return new HfTokenizer(tokenizerJson, configJson ?? {}, template, files);
    } catch (err) {
      throw new McprlError<TokenizerErrorCode>('TOKENIZER_INVALID', `${join(dir, 'tokenizer.json')}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  /**
   * Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their ids. No BOS/EOS is
   * added: chat templates write those themselves, as transformers' apply_chat_template assumes.
   */
  encode(text: string): number[] {
    return this.tok.encode(text, { add_special_tokens: false }).ids;
  }

  /**
   * `encode` on a worker thread (started on first use, one per tokenizer, see tokenize-off-thread.ts), for texts
   * long enough to hold the caller's event loop. The same files and library, so the same ids.
   */
  encodeOffThread(text: string, opts: OffThreadEncodeOptions = {}): Promise<number[]> {
    this.offThread ??= new OffThreadTokenizer(this.files);
    return this.offThread.encode(text, opts);
  }

  /** Stops encodeOffThread's worker thread (a later call starts a new one). */
  closeOffThread(): void {
    this.offThread?.close();
    this.offThread = null;
  }

  /** The worker thread of encodeOffThread, once started (tests read it). */
  get offThreadWorker(): OffThreadTokenizer | null {
    return this.offThread;
  }

  decode(ids: readonly number[], opts: DecodeOptions = {}): string {
    // The library refuses an empty list; an empty completion is ordinary here.
    if (ids.length === 0) return '';
    return this.tok.decode(ids as number[], { skip_special_tokens: opts.skipSpecialTokens ?? false });
  }

  tokenToId(token: string): number | undefined {
    return this.tok.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.tok.id_to_token(id);
  }

  /**
   * The raw bytes one token stands for (OpenAI's `bytes` field). For byte-level BPE a token can be part of a
   * UTF-8 character, so its bytes come from the byte-to-unicode table, not from decoding it alone. Ids
   * outside the vocabulary (models pad their embedding past the tokenizer) have no bytes.
   */
  tokenBytes(id: number): number[] {
    const piece = this.tok.id_to_token(id);
    if (piece === undefined) return [];
    if (!this.byteLevel || this.tok.get_added_tokens_decoder().has(id)) {
      return [...Buffer.from(this.decode([id]), 'utf8')];
    }
    const table = (this.byteDecoder ??= byteDecoder());
    const out: number[] = [];
    for (const ch of piece) {
      const b = table.get(ch);
      if (b === undefined) return [...Buffer.from(this.decode([id]), 'utf8')];
      out.push(b);
    }
    return out;
  }
}

/** GPT-2's reversible byte-to-unicode table of byte-level BPE: byte → the printable character standing for it. */
export function bytesToUnicode(): string[] {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const table: string[] = new Array(256);
  bs.forEach((b, i) => (table[b] = String.fromCodePoint(cs[i])));
  return table;
}

/** The inverse table: printable stand-in character → byte. */
function byteDecoder(): Map<string, number> {
  return new Map(bytesToUnicode().map((ch, b) => [ch, b]));
}

/**
 * Turns a growing list of token ids into text deltas (the windowed scheme vLLM and transformers' streamers
 * use): the newest tokens are decoded together with a few before them, so decoders whose output depends on
 * context (sentencepiece's leading space) and characters split across tokens come out right. A delta is held
 * back while it ends in an incomplete UTF-8 sequence (U+FFFD). The concatenated deltas plus `flush()` equal
 * `decode(allIds)`.
 */
export class IncrementalDecoder {
  readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  private text = '';

  constructor(
    private readonly tokenizer: HfTokenizer,
    private readonly opts: DecodeOptions = {},
  ) {}

  /** Appends one token; returns the text it completes (possibly ''). */
  push(id: number): string {
    this.ids.push(id);
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset), this.opts);
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset), this.opts);
    if (full.length > prefix.length && !full.endsWith('\uFFFD') && full.startsWith(prefix)) {
      const delta = full.slice(prefix.length);
      this.prefixOffset = this.readOffset;
      this.readOffset = this.ids.length;
      this.text += delta;
      return delta;
    }
    return '';
  }

  /** Text so far, not counting bytes held back. */
  get current(): string {
    return this.text;
  }

  /** Emits whatever is held back (an incomplete character decodes to U+FFFD, as `decode` does). */
  flush(): string {
    // The whole text is decoded once here, so the final text is exactly `decode(ids)` whatever the window saw.
    const whole = this.tokenizer.decode(this.ids, this.opts);
    const delta = whole.startsWith(this.text) ? whole.slice(this.text.length) : '';
    this.prefixOffset = this.readOffset = this.ids.length;
    this.text += delta;
    return delta;
  }
}
