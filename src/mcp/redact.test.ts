import { describe, expect, it } from 'vitest';
import { redact, secretsOf } from './redact.js';

describe('redact', () => {
  it('removes env values of stdio targets, also as JSON and URL escapes, and leaves short values alone', () => {
    const secrets = secretsOf({ kind: 'stdio', command: 'x', args: [], env: { K: 'pa"ss word-123', DEBUG: '1', MODE: 'short' } });
    expect(redact('got pa"ss word-123, "pa\\"ss word-123", pa%22ss%20word-123; DEBUG=1 short', secrets)).toBe(
      'got [redacted], "[redacted]", [redacted]; DEBUG=1 short',
    );
  });

  it('removes header values of HTTP targets and the credential after the scheme', () => {
    const secrets = secretsOf({ kind: 'http', url: 'http://x/mcp', headers: { Authorization: 'Bearer tok-abcdef', 'X-Key': 'key-987654' } });
    expect(redact('401: Bearer tok-abcdef; token tok-abcdef; key-987654', secrets)).toBe('401: [redacted]; token [redacted]; [redacted]');
  });
});
