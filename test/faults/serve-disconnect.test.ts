/**
 * Issue 12 §3: under 32 concurrent streams with half the clients hanging up, `mcprl serve`'s RSS kept growing.
 * This checks structurally that nothing is kept per request: after such a round (and again after a second one),
 * the engine's scheduler holds no request or sample, every KV-cache slot the native engine was asked for has been
 * freed, and no adapter is counted in use. No timing decides anything: the test waits for each stream's generator
 * to end, then for the engine's call chain (where the slot frees are queued) to drain.
 * The server is the real one (startServer) on the bundled tiny model; the clients are plain HTTP requests.
 */
import { request } from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatEngine, type ChatTurnRequest } from '../../src/chat/chat-engine.js';
import type { Model } from '../../src/engine/model.js';
import { startServer, type RunningServer } from '../../src/serve/server.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let engine: ChatEngine;
let srv: RunningServer;
/** KV-cache slots created and not yet freed, counted at the native engine's own methods. */
let liveSlots = 0;
let slotsCreated = 0;
/** One promise per stream the server started, settled when its generator has ended. */
let streamsEnded: Promise<void>[] = [];

beforeAll(async () => {
  engine = await ChatEngine.load(MODEL);
  await (engine.model as Model).run((e) => {
    const native = e as unknown as { slotCreate(cap: number): number; slotFree(id: number): void };
    const create = native.slotCreate.bind(native);
    const free = native.slotFree.bind(native);
    // The addon's methods are read-only on its prototype; own properties on this instance shadow them.
    Object.defineProperty(native, 'slotCreate', {
      value: (cap: number) => {
        slotsCreated++;
        liveSlots++;
        return create(cap);
      },
    });
    Object.defineProperty(native, 'slotFree', {
      value: (id: number) => {
        liveSlots--;
        free(id);
      },
    });
  });
  const stream = engine.stream.bind(engine);
  engine.stream = (req: ChatTurnRequest) => {
    const inner = stream(req);
    let ended!: () => void;
    streamsEnded.push(new Promise<void>((r) => (ended = r)));
    return (async function* () {
      try {
        return yield* inner;
      } finally {
        ended();
      }
    })();
  };
  srv = await startServer(engine, { port: 0 });
});
afterAll(async () => {
  await srv?.close();
  engine?.model.close();
});

/** One streaming request; with `hangUp` the client destroys its socket after the second chunk. */
function client(hangUp: boolean, seed: number): Promise<'finished' | 'hung up'> {
  const url = new URL(srv.url);
  const body = JSON.stringify({ model: engine.modelName, stream: true, max_tokens: 64, temperature: 1, seed, messages: [{ role: 'user', content: `Find book bk-00${seed % 9}.` }] });
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let chunks = 0;
      res.on('data', () => {
        if (hangUp && ++chunks === 2) {
          req.destroy();
          resolve('hung up');
        }
      });
      res.on('end', () => resolve('finished'));
      res.on('error', () => hangUp || reject(new Error('stream failed')));
    });
    req.on('error', (e) => (hangUp ? undefined : reject(e)));
    req.end(body);
  });
}

/** Waits until every stream the server started has ended and the engine's queued native calls have run. */
async function settled(): Promise<void> {
  await Promise.all(streamsEnded);
  await (engine.model as Model).run(() => undefined);
}

describe('mcprl serve keeps nothing per request after clients hang up', () => {
  for (const round of [1, 2]) {
    it(`round ${round}: 32 concurrent streams, half hanging up — no request, sample, KV slot or adapter hold is left`, async () => {
      streamsEnded = [];
      const created = slotsCreated;
      const outcomes = await Promise.all(Array.from({ length: 32 }, (_, i) => client(i % 2 === 0, round * 100 + i)));
      expect(outcomes.filter((o) => o === 'finished')).toHaveLength(16);
      expect(streamsEnded).toHaveLength(32);
      await settled();
      const scheduler = engine.model as unknown as { active: unknown[]; pending: unknown[] };
      expect(scheduler.active).toEqual([]);
      expect(scheduler.pending).toEqual([]);
      expect(slotsCreated - created).toBeGreaterThanOrEqual(32);
      expect(liveSlots).toBe(0);
      const routes = (engine as unknown as { routes: { inUse: Map<string, number> } }).routes;
      expect([...routes.inUse.values()].filter((n) => n !== 0)).toEqual([]);
      fault(`32 streams, 16 clients hanging up (round ${round})`, 'nothing kept per request', `scheduler empty; ${slotsCreated - created} KV slots created, all freed`);
    }, 300_000);
  }
});
