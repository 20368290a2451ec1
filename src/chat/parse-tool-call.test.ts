import { describe, expect, it } from 'vitest';
import { parseToolCalls, pythonJsonDumps, stableContent } from './parse-tool-call.js';

describe('parseToolCalls (Hermes form)', () => {
  it('returns plain text unchanged when there is no tool call', () => {
    const r = parseToolCalls('Hello there.\n');
    expect(r).toEqual({ content: 'Hello there.\n', toolCalls: [], invalidToolCalls: [] });
  });

  it('reads one call and keeps the text before it as content', () => {
    const r = parseToolCalls('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>');
    expect(r.content).toBe('Let me look.');
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0].name).toBe('get_weather');
    expect(JSON.parse(r.toolCalls[0].arguments)).toEqual({ city: 'Paris' });
    expect(r.invalidToolCalls).toEqual([]);
  });

  it('reads several calls and joins the text between and after them', () => {
    const text =
      'A<tool_call>{"name":"a","arguments":{"x":1}}</tool_call>\nB\n<tool_call>{"name":"b","arguments":{"y":[1,2]}}</tool_call> C ';
    const r = parseToolCalls(text);
    expect(r.toolCalls.map((c) => c.name)).toEqual(['a', 'b']);
    expect(r.toolCalls[1].arguments).toBe('{"y": [1, 2]}');
    expect(r.content).toBe('A\nB\n C');
  });

  it('gives null content when only whitespace surrounds the calls', () => {
    const r = parseToolCalls('\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n');
    expect(r.content).toBeNull();
    expect(r.toolCalls).toHaveLength(1);
  });

  it('reports malformed JSON, a missing name, bad arguments and an unclosed tag as invalid calls', () => {
    const text = [
      '<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>',
      '<tool_call>{"arguments": {}}</tool_call>',
      '<tool_call>{"name": "g", "arguments": [1]}</tool_call>',
      '<tool_call>{"name": "ok", "arguments": {"z": "é"}}</tool_call>',
      '<tool_call>{"name": "h", "argu',
    ].join('\n');
    const r = parseToolCalls(text);
    expect(r.toolCalls.map((c) => c.name)).toEqual(['ok']);
    expect(r.toolCalls[0].arguments).toBe('{"z": "é"}');
    expect(r.invalidToolCalls).toHaveLength(4);
    expect(r.invalidToolCalls[0].error).toMatch(/not valid JSON/);
    expect(r.invalidToolCalls[0].raw).toBe('{"name": "f", "arguments": {"x": 1}');
    expect(r.invalidToolCalls[1].error).toMatch(/no "name"/);
    expect(r.invalidToolCalls[2].error).toMatch(/must be a JSON object/);
    expect(r.invalidToolCalls[3].error).toMatch(/unterminated/);
    expect(r.invalidToolCalls[3].raw).toBe('{"name": "h", "argu');
    expect(r.content).toBeNull();
  });

  it('accepts arguments written as a JSON string, or missing, or under "parameters"', () => {
    const r = parseToolCalls(
      '<tool_call>{"name": "a", "arguments": "{\\"q\\": 2}"}</tool_call><tool_call>{"name": "b"}</tool_call>' +
        '<tool_call>{"name": "c", "parameters": {"k": true}}</tool_call>',
    );
    expect(r.toolCalls.map((c) => [c.name, c.arguments])).toEqual([
      ['a', '{"q": 2}'],
      ['b', '{}'],
      ['c', '{"k": true}'],
    ]);
  });

  it('leaves tool-call tags inside a think block in the content', () => {
    const text = '<think>\nmaybe <tool_call>{"name": "x"}</tool_call>?\n</think>\n\nAnswer.<tool_call>{"name": "y", "arguments": {}}</tool_call>';
    const r = parseToolCalls(text);
    expect(r.toolCalls.map((c) => c.name)).toEqual(['y']);
    expect(r.content).toBe('<think>\nmaybe <tool_call>{"name": "x"}</tool_call>?\n</think>\n\nAnswer.');
    const open = parseToolCalls('<think>thinking <tool_call>{"name": "x"}</tool_call>');
    expect(open.toolCalls).toEqual([]);
    expect(open.invalidToolCalls).toEqual([]);
  });

  it('never throws on arbitrary text', () => {
    const samples = ['<tool_call>', '</tool_call>', '<tool_call></tool_call>', '<tool_call>null</tool_call>', '<think>', '</think><tool_call>1'];
    for (const s of samples) expect(() => parseToolCalls(s)).not.toThrow();
    expect(parseToolCalls('<tool_call>null</tool_call>').invalidToolCalls).toHaveLength(1);
  });
});

describe('stableContent', () => {
  // Every prefix's stable content must be a prefix of the final content, or a stream would send text it
  // later has to take back.
  const texts = [
    'Hello world.  \n',
    'Let me check.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\nDone. ',
    '  <tool_call>{"name": "f"}</tool_call>',
    '<think>a <tool_call>b</tool_call></think> x <tool_call>{"name":"g"}',
    'a <tool_ca',
    'text < tool <tool',
  ];
  for (const text of texts) {
    it(`is monotone and ends at the final content for ${JSON.stringify(text)}`, () => {
      const final = parseToolCalls(text).content ?? '';
      let prev = '';
      for (let i = 0; i <= text.length; i++) {
        const s = stableContent(text.slice(0, i));
        expect(s.startsWith(prev)).toBe(true);
        expect(final.startsWith(s)).toBe(true);
        prev = s;
      }
    });
  }

  it('holds back a partial <tool_call> tag', () => {
    expect(stableContent('Hi <tool_c')).toBe('Hi');
    expect(stableContent('Hi <b>')).toBe('Hi <b>');
  });
});

describe('pythonJsonDumps', () => {
  it('writes Python json.dumps separators and keeps non-ASCII', () => {
    expect(pythonJsonDumps({ a: 1, b: [true, null, 'ü\n'], c: { d: 1.5 } })).toBe('{"a": 1, "b": [true, null, "ü\\n"], "c": {"d": 1.5}}');
    expect(pythonJsonDumps({})).toBe('{}');
  });
});
