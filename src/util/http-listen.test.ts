import { Agent, createServer, request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { httpOrigin, listenHttp } from './http-listen.js';

describe('listenHttp', () => {
  it('names the origin with an IPv6 host in brackets', () => {
    expect(httpOrigin('127.0.0.1', 8000)).toBe('http://127.0.0.1:8000');
    expect(httpOrigin('::1', 8000)).toBe('http://[::1]:8000');
    expect(httpOrigin('localhost', 1)).toBe('http://localhost:1');
  });

  it('binds a free port, and close ends a keep-alive connection a client still holds', async () => {
    const server = createServer((_req, res) => res.end('ok'));
    const listening = await listenHttp(server, 0, '127.0.0.1');
    expect(listening.port).toBeGreaterThan(0);
    expect(listening.origin).toBe(`http://127.0.0.1:${listening.port}`);
    const agent = new Agent({ keepAlive: true });
    const body = await new Promise<string>((resolve, reject) => {
      request(listening.origin, { agent }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve(text));
      })
        .on('error', reject)
        .end();
    });
    expect(body).toBe('ok');
    await listening.close();
    expect(server.listening).toBe(false);
    agent.destroy();
  });

  it('rejects with the server error when the port is taken', async () => {
    const first = await listenHttp(createServer(), 0, '127.0.0.1');
    await expect(listenHttp(createServer(), first.port, '127.0.0.1')).rejects.toMatchObject({ code: 'EADDRINUSE' });
    await first.close();
  });
});
