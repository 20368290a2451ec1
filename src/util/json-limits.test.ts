import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { checkJsonLimits, JsonLimitScanner, safeParseFirst } from './json-limits.js';

/** The scanner fed `text` one byte at a time (every chunk boundary at once). */
function byteByByte(text: string, limits = {}): void {
  const s = new JsonLimitScanner(limits);
  for (const b of Buffer.from(text)) s.push(Uint8Array.of(b));
}

describe('JsonLimitScanner', () => {
  it('passes JSON within the limits, whole or split anywhere', () => {
    const text = JSON.stringify({ a: [1, 2, { 'k"}]': 'v\\"[{' }], b: { c: null, d: true, e: -1.5e3 }, s: '\u00e9\u{1F600}' });
    expect(() => checkJsonLimits(text, { maxDepth: 3, maxArrayLength: 3, maxObjectKeys: 3 })).not.toThrow();
    expect(() => byteByByte(text, { maxDepth: 3, maxArrayLength: 3, maxObjectKeys: 3 })).not.toThrow();
  });

  it('names the field past each limit', () => {
    const cases: [string, object, string, string | null][] = [
      ['{"a":{"b":[[1]]}}', { maxDepth: 3 }, 'JSON_TOO_DEEP', 'a.b.0'],
      ['{"x":[1,"two",{},[],null,true]}', { maxArrayLength: 5 }, 'JSON_ARRAY_TOO_LONG', 'x'],
      ['[{"a":1,"b":2,"c":3}]', { maxObjectKeys: 2 }, 'JSON_OBJECT_TOO_LARGE', '0'],
      ['{"t":[0,"abcdef"]}', { maxStringBytes: 5 }, 'JSON_STRING_TOO_LONG', 't.1'],
      ['[[[[1]]]]', { maxDepth: 2 }, 'JSON_TOO_DEEP', '0.0'],
      ['[1,2,3]', { maxArrayLength: 2 }, 'JSON_ARRAY_TOO_LONG', null],
    ];
    for (const [text, limits, code, field] of cases) {
      for (const scan of [() => checkJsonLimits(text, limits), () => byteByByte(text, limits)]) {
        expect(scan, text).toThrow(expect.objectContaining({ code, field }));
      }
    }
  });

  it('shortens a deep path and a long key', () => {
    const deep = '{"a":'.repeat(100) + '1' + '}'.repeat(100);
    expect(() => checkJsonLimits(deep)).toThrow(expect.objectContaining({ field: 'a.a.a.a.a.a.a.a.a.a.a.a.…' }));
    const long = `{"${'k'.repeat(100)}":[[1]]}`;
    expect(() => checkJsonLimits(long, { maxDepth: 2 })).toThrow(expect.objectContaining({ field: '….0' }));
  });
});

describe('safeParseFirst', () => {
  it('stops at the first invalid element', () => {
    const schema = z.object({ ids: z.array(z.number().int()) });
    const r = safeParseFirst(schema, { ids: Array.from({ length: 100_000 }, () => 'x') });
    expect(r.success).toBe(false);
    expect(r.error!.issues).toHaveLength(1);
    expect(r.error!.issues[0].path).toEqual(['ids', 0]);
    expect(safeParseFirst(schema, { ids: [1, 2] })).toEqual({ success: true, data: { ids: [1, 2] } });
  });
});
