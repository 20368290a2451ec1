import type { IncomingMessage } from 'node:http';
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { checkToken, createHttpGuard } from './http-guard.js';

/** The parts of a request the guard reads. */
function req(headers: Record<string, string>, method = 'POST', url = '/v1/chat/completions'): IncomingMessage {
  return { method, url, headers, socket: {} } as unknown as IncomingMessage;
}
const json = { 'content-type': 'application/json' };

describe('createHttpGuard', () => {
  const guard = createHttpGuard({ host: '127.0.0.1', allowedHosts: ['gpu-box.lan'], allowedOrigins: ['http://localhost:6274'] });
  const code = (r: IncomingMessage) => guard.check(r)?.code ?? 'ok';

  it('admits loopback names, the bound host and allowed hosts, whatever the port', () => {
    for (const host of ['127.0.0.1:8000', 'localhost:1', 'LOCALHOST', '[::1]:8000', 'gpu-box.lan:8100']) expect(code(req({ host, ...json })), host).toBe('ok');
    for (const host of ['evil.example:8000', '127.0.0.1.evil.example', '127.attacker.example:8000', '', 'a b']) expect(code(req({ host, ...json })), host).toBe('forbidden_host');
    expect(code(req({ ...json }))).toBe('forbidden_host');
  });

  it('admits the server\'s own origin (port included) and allowed ones; no Origin passes', () => {
    expect(code(req({ host: 'localhost:8000', origin: 'http://localhost:8000', ...json }))).toBe('ok');
    expect(code(req({ host: 'localhost:8000', origin: 'http://localhost:6274', ...json }))).toBe('ok');
    for (const origin of ['http://localhost:8001', 'https://localhost:8000', 'http://evil.example', 'null', 'file://']) {
      expect(code(req({ host: 'localhost:8000', origin, ...json })), origin).toBe('forbidden_origin');
    }
  });

  it('wants application/json for bodies, not for GET', () => {
    expect(code(req({ host: 'localhost', 'content-type': 'application/json; charset=utf-8' }))).toBe('ok');
    for (const ct of ['text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx']) {
      expect(code(req({ host: 'localhost', 'content-type': ct })), ct).toBe('unsupported_media_type');
    }
    expect(code(req({ host: 'localhost' }))).toBe('unsupported_media_type');
    expect(code(req({ host: 'localhost' }, 'GET', '/health'))).toBe('ok');
    expect(code(req({ host: 'localhost', 'content-length': '5' }, 'DELETE', '/x'))).toBe('unsupported_media_type');
  });

  it('checks the token but on open paths; blank tokens are refused', () => {
    const g = createHttpGuard({ host: '127.0.0.1', token: 's3cret', open: ['/health'] });
    expect(g.check(req({ host: 'localhost', ...json }))?.status).toBe(401);
    expect(g.check(req({ host: 'localhost', authorization: 'Bearer nope', ...json }))?.status).toBe(401);
    expect(g.check(req({ host: 'localhost', authorization: 'Bearer s3cret', ...json }))).toBeNull();
    expect(g.check(req({ host: 'localhost' }, 'GET', '/health'))).toBeNull();
    // The Host and Origin checks come first: a page learns nothing about the token.
    expect(g.check(req({ host: 'evil.example', authorization: 'Bearer s3cret', ...json }))?.status).toBe(403);
    for (const t of ['', '  ', '\t', 'a b']) expect(() => checkToken(t)).toThrow(expect.objectContaining({ code: 'SERVER_CONFIG' }));
  });

  it('a wildcard bind answers to this machine\'s name too', () => {
    const g = createHttpGuard({ host: '0.0.0.0' });
    expect(g.hosts).toContain(new URL(`http://${hostname()}`).hostname);
    expect(g.check(req({ host: `${hostname()}:8100`, ...json }))).toBeNull();
    expect(g.check(req({ host: 'evil.example', ...json }))?.code).toBe('forbidden_host');
  });
});
