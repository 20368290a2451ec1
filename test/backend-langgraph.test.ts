/**
 * The LangGraph.js example (examples/langgraph.ts) on the bundled tiny model: its ChatOpenAI model streams from
 * the trainable model's endpoint, the recorder keeps exactly the token ids and logprobs the server sent, and two
 * training steps through the library each advance the model's step.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { playLangGraph, trainLangGraph } from '../examples/langgraph.js';
import { LocalBackend, TrainableModel } from '../src/index.js';
import { TINY_MODEL } from './backend-helpers.js';

interface WireChunk {
  choices?: { index: number; mcprl_token_ids?: number[]; logprobs?: { content?: { logprob: number }[] | null } | null }[];
}

/** A fetch that keeps a copy of every chat-completion answer's body, read in full by `bodies()`. */
function wireTap(): { fetch: typeof fetch; requests: Record<string, unknown>[]; bodies: () => Promise<string[]> } {
  const requests: Record<string, unknown>[] = [];
  const copies: Promise<string>[] = [];
  const tap: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (!String(input instanceof Request ? input.url : input).endsWith('/chat/completions') || !res.body) return res;
    requests.push(JSON.parse(init!.body as string) as Record<string, unknown>);
    const [mine, theirs] = res.body.tee();
    copies.push(new Response(theirs).text());
    return new Response(mine, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return { fetch: tap, requests, bodies: () => Promise.all(copies) };
}

/** The ids and logprobs a server-sent stream carried for its first choice. */
function streamed(body: string): { ids: number[]; logprobs: number[] } {
  const ids: number[] = [];
  const logprobs: number[] = [];
  for (const line of body.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    for (const c of (JSON.parse(line.slice(6)) as WireChunk).choices ?? []) {
      if (c.index !== 0) continue;
      ids.push(...(c.mcprl_token_ids ?? []));
      logprobs.push(...(c.logprobs?.content ?? []).map((t) => t.logprob));
    }
  }
  return { ids, logprobs };
}

describe('the LangGraph.js example', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-langgraph-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('streams from the trainable model, and the trajectory keeps exactly the ids and logprobs the server sent', async () => {
    const backend = new LocalBackend({ dir: join(dir, 'one') });
    try {
      const model = new TrainableModel({ project: 'langgraph', name: 'once', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8 } });
      await model.register(backend);
      const wire = wireTap();
      const t = await playLangGraph(model, { gameSeed: 7, samplingSeed: 11, fetch: wire.fetch });
      const bodies = await wire.bodies();
      expect(wire.requests.length).toBeGreaterThan(0);
      for (const r of wire.requests) expect(r).toMatchObject({ model: 'once', stream: true, logprobs: true });
      const turns = t.messages.filter((m) => m.role === 'assistant');
      expect(turns).toHaveLength(bodies.length);
      turns.forEach((m, k) => {
        const sent = streamed(bodies[k]);
        expect(sent.ids.length).toBeGreaterThan(0);
        expect(m.mcprl!.token_ids).toEqual(sent.ids);
        expect(m.mcprl!.logprobs).toEqual(sent.logprobs);
      });
      expect(t.metrics!.valid_guesses).toBeLessThanOrEqual(turns.length);
    } finally {
      await backend.close();
    }
  });

  it('trains two steps through the library on the recorded ids', async () => {
    const { results, groups } = await trainLangGraph({ dir: join(dir, 'train'), baseModel: TINY_MODEL, steps: 2, games: 4, perGroup: 4, lr: 2e-3 });
    expect(results.map((r) => r.step)).toEqual([1, 2]);
    for (const r of results) {
      expect(r.trained).toBe(true);
      expect(r.retokenizedTurns).toBe(0);
      expect(Number.isFinite(r.loss)).toBe(true);
    }
    for (const t of groups.flat().flatMap((g) => g.trajectories)) {
      for (const m of t.messages.filter((x) => x.role === 'assistant')) expect(m.mcprl!.token_ids.length).toBeGreaterThan(0);
    }
  });
});
