/**
 * The rollout pool against real `mcprl serve` servers (in this process, over HTTP) on the bundled tiny model:
 * adapters published under a new name, requests round robin, at most `concurrencyPerServer` in flight on a server, a
 * dead server dropped with a warning, a refused request passed on without dropping its server, and no server left
 * as a typed error.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PolicyError } from '../src/agent/policy.js';
import { ChatEngine } from '../src/chat/chat-engine.js';
import type { Model } from '../src/engine/model.js';
import { Trainer } from '../src/engine/trainer.js';
import { startServer, type RunningServer } from '../src/serve/server.js';
import { RolloutPool } from '../src/train/rollout-pool.js';
import { freePort, REPO_ROOT } from './helpers/servers.js';

const MODEL = process.env.MCPRL_TEST_TINY_MODEL ?? join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');

let work: string;
let engines: ChatEngine[];
let servers: RunningServer[];
let trainer: Trainer;
const ask = { messages: [{ role: 'user' as const, content: 'Is bk-001 in stock?' }], tools: [] };
// How the pools' rollouts sample: greedy, short turns.
const sampling = { temperature: 0, maxTokens: 4 };

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'mcprl-pool-'));
  // Two servers, each with its own engine (as two processes would have), and the trainer's engine.
  engines = [await ChatEngine.load(MODEL), await ChatEngine.load(MODEL), await ChatEngine.load(MODEL)];
  servers = [await startServer(engines[0], { port: 0, loraUpdating: true }), await startServer(engines[1], { port: 0, loraUpdating: true })];
  trainer = await Trainer.create(engines[2].model as Model, { adapterName: 'policy', rank: 2, alpha: 4, targets: ['q_proj'], seed: 1, optimizer: { lr: 1e-3 } });
});

afterAll(async () => {
  for (const s of servers ?? []) await s.close();
  for (const e of engines ?? []) (e.model as Model).close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('RolloutPool', () => {
  it('publishes each adapter under a new name, answers round robin with the server\'s token ids, and unloads the old one', async () => {
    const answered: string[] = [];
    const pool = new RolloutPool({ urls: servers.map((s) => s.url), adapterDir: join(work, 'a') }, { ...sampling, events: { onAnswer: (u) => answered.push(u) } });
    await pool.publish(0, trainer);
    expect(pool.name).toBe('policy-step-0');
    for (const e of engines.slice(0, 2)) expect(e.modelNames().map((m) => m.id)).toContain('policy-step-0');
    const turns = [];
    for (let i = 0; i < 4; i++) turns.push(await pool.next(ask));
    expect(answered).toEqual([servers[0].url, servers[1].url, servers[0].url, servers[1].url]);
    for (const t of turns) {
      expect(t.tokenIds!.length).toBeGreaterThan(0);
      expect(t.logprobs).toHaveLength(t.tokenIds!.length);
    }
    await pool.publish(1, trainer);
    for (const e of engines.slice(0, 2)) {
      const names = e.modelNames().map((m) => m.id);
      expect(names).toContain('policy-step-1');
      expect(names).not.toContain('policy-step-0');
    }
    expect(await readdir(join(work, 'a'))).toEqual(['policy-step-1']);
    expect(pool.takeStats()).toEqual({ servers_alive: 2, servers_dropped: 0, rollout_requests: 4, rollout_retries: 0 });
    await pool.close();
    for (const e of engines.slice(0, 2)) expect(e.modelNames().map((m) => m.id)).not.toContain('policy-step-1');
  });

  it('keeps at most concurrencyPerServer requests in flight on a server', async () => {
    // A pass-through proxy in front of the real server counts the chat completions in flight. It holds each one until
    // `limit` are in flight (or every request has arrived), so that a pool sending more than the limit at once is
    // seen doing so; one within the limit passes whatever the timing.
    const limit = 2, total = 5;
    let inFlight = 0, most = 0, arrived = 0;
    let held: (() => void)[] = [];
    const upstream = new URL(servers[0].url);
    const proxy = createServer((req: IncomingMessage, res: ServerResponse) => {
      const forward = () => req.pipe(request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
        res.writeHead(up.statusCode!, up.headers);
        up.pipe(res);
      }));
      if (!req.url!.endsWith('/chat/completions')) return forward();
      inFlight += 1;
      arrived += 1;
      most = Math.max(most, inFlight);
      res.on('close', () => (inFlight -= 1));
      held.push(forward);
      if (inFlight >= limit || arrived === total) {
        for (const f of held) f();
        held = [];
      }
    });
    await new Promise<void>((done) => proxy.listen(0, '127.0.0.1', done));
    const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`;
    const pool = new RolloutPool({ urls: [url], adapterDir: join(work, 'limit'), concurrencyPerServer: limit }, sampling);
    try {
      await pool.publish(0, trainer);
      const turns = await Promise.all(Array.from({ length: total }, () => pool.next(ask)));
      for (const t of turns) expect(t.tokenIds!.length).toBeGreaterThan(0);
      expect(arrived).toBe(total);
      expect(most).toBe(limit);
    } finally {
      await pool.close();
      await new Promise<void>((done) => proxy.close(() => done()));
    }
  });

  it('drops a server that cannot be reached with a warning and carries on with the others', async () => {
    const dead = `http://127.0.0.1:${await freePort()}/v1`;
    const lines: string[] = [];
    const pool = new RolloutPool({ urls: [dead, servers[0].url], adapterDir: join(work, 'b'), attempts: 2 }, { ...sampling, log: (l) => lines.push(l) });
    await pool.publish(0, trainer);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^warning: rollout server ${dead} dropped from the pool: loading adapter policy-step-0 failed 2 times .*; 1 server left$`));
    expect((await pool.next(ask)).tokenIds!.length).toBeGreaterThan(0);
    expect(pool.takeStats()).toEqual({ servers_alive: 1, servers_dropped: 1, rollout_requests: 1, rollout_retries: 1 });
    await pool.close();
  });

  it('replaces an adapter name the server still serves (a resumed run), and passes a refused request on without dropping the server', async () => {
    // What a run that crashed left loaded: the name a resumed run publishes first.
    await trainer.saveAdapter(join(work, 'left-over'));
    const res = await fetch(`${servers[0].url}/load_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'policy-step-0', lora_path: join(work, 'left-over') }) });
    expect(res.status).toBe(200);
    const lines: string[] = [];
    const pool = new RolloutPool({ urls: [servers[0].url], adapterDir: join(work, 'c') }, { ...sampling, log: (l) => lines.push(l) });
    await pool.publish(0, trainer);
    expect(lines).toEqual([]);
    // The name now serves the pool's folder, not the left-over one.
    const model = await (await fetch(`${servers[0].url}/models/policy-step-0`)).json();
    expect(model.root).toBe(join(work, 'c', 'policy-step-0'));
    const err = await pool.at(pool.name, 7).next(ask).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PolicyError);
    expect((err as PolicyError).status).toBe(400);
    expect(pool.alive).toEqual([servers[0].url]);
    await pool.close();
  });

  it('fails with ROLLOUT_POOL_EMPTY when no server is left', async () => {
    const pool = new RolloutPool({ urls: [`http://127.0.0.1:${await freePort()}/v1`], adapterDir: join(work, 'd'), attempts: 1 }, { ...sampling, log: () => undefined });
    const err = await pool.publish(0, trainer).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ROLLOUT_POOL_EMPTY' });
    await expect(pool.next(ask)).rejects.toMatchObject({ code: 'ROLLOUT_POOL_EMPTY' });
  });
});
