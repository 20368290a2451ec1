/**
 * The training server's bounds, in-process over real HTTP: a request body past `maxBodyBytes` is refused with 413
 * before it is parsed (declared or streamed), and a model named so as to leave the server's folder is refused,
 * naming the field, with nothing written outside the folder.
 */
import { request } from 'node:http';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBackendServer, type RunningBackendServer } from '../src/index.js';
import { TINY_MODEL } from './backend-helpers.js';

const MAX = 4096;

describe('mcprl backend bounds', () => {
  let root: string;
  let running: RunningBackendServer;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'mcprl-backend-bounds-'));
    running = await startBackendServer({ dir: join(root, 'store'), port: 0, maxBodyBytes: MAX });
  });
  afterAll(async () => {
    await running?.close();
    await rm(root, { recursive: true, force: true });
  });

  const post = (path: string, body: unknown) =>
    fetch(`${running.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('refuses a body over maxBodyBytes with 413, declared or streamed without a length', async () => {
    const big = { model: { project: 'p', name: 'n' }, groups: [{ trajectories: [{ messages: [{ role: 'user', content: 'x'.repeat(2 * MAX) }], reward: 1 }] }] };
    const declared = await post('/backend/train', big);
    expect(declared.status).toBe(413);
    const e = ((await declared.json()) as { error: { code: string; message: string } }).error;
    expect(e.code).toBe('BACKEND_INVALID');
    expect(e.message).toMatch(`over ${MAX} bytes`);

    // Chunked: no content-length, so the bound is met while reading.
    const streamed = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${running.url}/backend/train`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      // The server may answer and close before the whole body is sent; that is the point.
      req.on('error', (err) => (/EPIPE|ECONNRESET/.test(String(err)) ? undefined : reject(err)));
      const chunk = JSON.stringify(big);
      req.write(chunk.slice(0, MAX));
      req.end(chunk.slice(MAX));
    });
    expect(streamed.status).toBe(413);
    expect(JSON.parse(streamed.body).error.message).toMatch(`over ${MAX} bytes`);

    const health = await fetch(`${running.url}/health`);
    expect(health.status).toBe(200);
  });

  it('refuses model names that would leave its folder, naming the field, and writes nothing', async () => {
    for (const [field, settings] of [
      ['settings.project', { project: '..', name: 'escape', baseModel: TINY_MODEL }],
      ['settings.name', { project: 'p', name: '../../escape', baseModel: TINY_MODEL }],
      ['settings.name', { project: 'p', name: '/tmp/escape', baseModel: TINY_MODEL }],
    ] as const) {
      const r = await post('/backend/register', { settings });
      expect(r.status).toBe(400);
      const e = ((await r.json()) as { error: { code: string; field: string } }).error;
      expect(e.code).toBe('BACKEND_INVALID');
      expect(e.field).toBe(field);
    }
    // A key that was never registered is not looked up on disk either.
    const r = await post('/backend/checkpoints', { model: { project: '..', name: '..' } });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { field: string } }).error.field).toBe('body.model.project');
    expect(existsSync(join(root, 'escape'))).toBe(false);
    expect(await readdir(root)).toEqual(existsSync(join(root, 'store')) ? ['store'] : []);
  });
});
