import { describe, expect, it } from 'vitest';
import { capText, mediaBlocks, resultToText } from './normalize.js';

describe('mediaBlocks', () => {
  it('keeps the MIME type and size of image and audio blocks, in order, and nothing of other blocks', () => {
    expect(
      mediaBlocks({
        content: [
          { type: 'text', text: 'first' },
          { type: 'image', mimeType: 'image/png', data: Buffer.alloc(70).toString('base64') },
          { type: 'audio', mimeType: 'audio/wav', data: Buffer.alloc(5).toString('base64') },
          { type: 'resource', resource: { uri: 'mem://n', mimeType: 'image/png', blob: 'AAAA' } },
        ],
      }),
    ).toEqual([{ type: 'image', mimeType: 'image/png', bytes: 70 }, { type: 'audio', mimeType: 'audio/wav', bytes: 5 }]);
    expect(mediaBlocks({ content: [{ type: 'text', text: 'x' }] })).toEqual([]);
  });
});

describe('resultToText', () => {
  it('joins text blocks, summarises media by type and size, and keeps embedded text resources', () => {
    const text = resultToText({
      content: [
        { type: 'text', text: 'first' },
        { type: 'image', mimeType: 'image/png', data: Buffer.alloc(301).toString('base64') },
        { type: 'resource', resource: { uri: 'mem://n', mimeType: 'text/plain', text: 'note' } },
        { type: 'resource_link', uri: 'file:///x', name: 'x' },
      ],
    });
    expect(text).toBe('first\n[image: image/png, 301 bytes]\n[resource: mem://n, text/plain, 4 chars]\nnote\n[resource link: file:///x (x)]');
  });

  it('adds structuredContent as JSON unless a text block already mirrors it', () => {
    expect(resultToText({ content: [], structuredContent: { a: 1 } })).toBe('{"a":1}');
    expect(resultToText({ content: [{ type: 'text', text: '{\n "a": 1\n}' }], structuredContent: { a: 1 } })).toBe('{\n "a": 1\n}');
    expect(resultToText({ content: [{ type: 'text', text: 'sum' }], structuredContent: { a: 1 } })).toBe('sum\n{"a":1}');
  });
});

describe('capText', () => {
  it('cuts at the cap and appends a visible marker with both sizes', () => {
    const r = capText('y'.repeat(50), 10);
    expect(r.truncated).toBe(true);
    expect(r.text.startsWith('y'.repeat(10) + '\n')).toBe(true);
    expect(r.text).toContain('showing 10 of 50 characters');
    expect(capText('short', 10)).toEqual({ text: 'short', truncated: false });
  });
});
