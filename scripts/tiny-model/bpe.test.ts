import { Tokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { GROUPED_DIGITS_SPLIT_REGEX, trainByteLevelBpe } from './bpe.js';

const corpus = [
  'Find the book "Dune" (bk-017) and tell me its price in EUR.',
  'The author au-03 wrote three mystery books; which one is the newest?',
  '<tool_call>{"name": "get_book", "arguments": {"book_id": "bk-017"}}</tool_call>',
  'Stock for bk-005 is 12 copies. The price is 14.50 USD.',
].flatMap((t) => [t, t.toUpperCase(), t.replace(/book/g, 'books')]);
const added = [
  { content: '<|endoftext|>', special: true },
  { content: '<|im_start|>', special: true },
  { content: '<|im_end|>', special: true },
  { content: '<tool_call>', special: false },
  { content: '</tool_call>', special: false },
];

describe('trainByteLevelBpe', () => {
  const json = trainByteLevelBpe(corpus, { vocabSize: 400, addedTokens: added, minFrequency: 2 });
  const tok = new Tokenizer(json, { eos_token: '<|im_end|>' });

  it('is loaded by @huggingface/tokenizers and round-trips any text, including unseen bytes', () => {
    for (const s of [...corpus, 'ünïcode 日本語 ✓ \t\n tabs', '<|im_start|>user\nhi<|im_end|>\n']) {
      expect(tok.decode(tok.encode(s).ids)).toBe(s.normalize('NFC'));
    }
  });

  it('learns merges (frequent words become single tokens) and keeps added tokens whole with their ids', () => {
    const vocab = (json.model as { vocab: Record<string, number> }).vocab;
    expect(Object.keys(vocab).length + added.length).toBeLessThanOrEqual(400);
    expect(Object.keys(vocab).length).toBeGreaterThan(256);
    const enc = tok.encode('<tool_call>{"name": "get_book"}</tool_call>');
    expect(enc.tokens[0]).toBe('<tool_call>');
    expect(enc.ids[0]).toBe(Object.keys(vocab).length + 3);
    expect(tok.encode(' price').ids.length).toBe(1);
    expect(tok.decode(tok.encode('<|im_start|>x<|im_end|>').ids, { skip_special_tokens: true })).toBe('x');
  });

  it('groups digits in runs of up to three with GROUPED_DIGITS_SPLIT_REGEX', () => {
    const grouped = new Tokenizer(trainByteLevelBpe(corpus, { vocabSize: 400, addedTokens: added, splitRegex: GROUPED_DIGITS_SPLIT_REGEX, minFrequency: 1 }), {});
    expect(grouped.encode('bk-017').tokens).toContain('017');
    expect(grouped.decode(grouped.encode('12345 bk-017').ids)).toBe('12345 bk-017');
    expect(tok.encode('bk-017').tokens).not.toContain('017');
  });

  it('is deterministic', () => {
    expect(JSON.stringify(trainByteLevelBpe(corpus, { vocabSize: 400, addedTokens: added }))).toBe(JSON.stringify(json));
  });
});
