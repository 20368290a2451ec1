import { describe, expect, it } from 'vitest';
import { extractJson } from './extract-json.js';

describe('extractJson', () => {
  it('finds JSON in the whole text, fenced blocks, braces and brackets inside prose', () => {
    expect(extractJson(' {"a":1} ')).toEqual({ a: 1 });
    expect(extractJson('```json\n{"a":1}\n```')).toEqual({ a: 1 });
    expect(extractJson('text before {"a":[1,2]} after')).toEqual({ a: [1, 2] });
    expect(extractJson('scores: [1, 2] done')).toEqual([1, 2]);
    expect(extractJson('null')).toBeNull();
  });

  it('answers undefined when nothing parses', () => {
    expect(extractJson('nothing here')).toBeUndefined();
    expect(extractJson('{ broken')).toBeUndefined();
  });
});
