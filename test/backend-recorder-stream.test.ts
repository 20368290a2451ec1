/**
 * The recorder on streamed completions (`stream: true` on the openai SDK), with the real engine and the bundled
 * tiny model behind a LocalBackend: the trajectory keeps exactly the token ids and logprobs the stream carried,
 * which are those of the same completion asked for whole, and it trains without re-tokenising.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalBackend, TrainableModel, TrajectoryRecorder } from '../src/index.js';
import { TINY_MODEL } from './backend-helpers.js';

type Whole = OpenAI.Chat.Completions.ChatCompletion & { choices: { mcprl_token_ids: number[] }[] };
type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk & { choices: { mcprl_token_ids?: number[] }[] };

const QUESTION = 'Which books by Ursula K. Le Guin are in stock?';

describe('TrajectoryRecorder on streams', () => {
  let dir: string;
  let backend: LocalBackend;
  let model: TrainableModel;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-recorder-stream-'));
    backend = new LocalBackend({ dir });
    model = new TrainableModel({ project: 'rec', name: 'streamer', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8 } });
    await model.register(backend);
  });
  afterAll(async () => {
    await backend?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps the streamed ids and logprobs, the same as the whole completion\'s, matched in a later turn, and trains on them as sampled', async () => {
    const request = { model: model.inferenceName, messages: [{ role: 'user' as const, content: QUESTION }], temperature: 0, max_tokens: 24 };
    const whole = (await model.openai({ maxRetries: 0 }).chat.completions.create({ ...request, logprobs: true })) as Whole;
    const wholeIds = whole.choices[0].mcprl_token_ids;
    const wholeLogprobs = whole.choices[0].logprobs!.content!.map((t) => t.logprob);
    expect(wholeIds.length).toBeGreaterThan(0);

    const recorder = new TrajectoryRecorder();
    const client = model.openai({ fetch: recorder.fetch, maxRetries: 0 });
    // The agent streams and asks for no logprobs; the recorder does.
    const stream = await client.chat.completions.create({ ...request, stream: true });
    let text = '';
    const streamedIds: number[] = [];
    for await (const chunk of stream as AsyncIterable<Chunk>) {
      text += chunk.choices[0]?.delta.content ?? '';
      streamedIds.push(...(chunk.choices[0]?.mcprl_token_ids ?? []));
    }
    expect(streamedIds).toEqual(wholeIds);
    expect(text).toBe(whole.choices[0].message.content);

    // A second, whole turn after the streamed one: the streamed turn is matched by its text.
    const second = await client.chat.completions.create({
      ...request,
      messages: [...request.messages, { role: 'assistant', content: text }, { role: 'user', content: 'And by Tolkien?' }],
    });
    const t = recorder.trajectory({ reward: 1 });
    expect(t.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    const streamed = t.messages[1];
    expect(streamed.content).toBe(text);
    expect(streamed.mcprl!.token_ids).toEqual(wholeIds);
    expect(streamed.mcprl!.logprobs).toHaveLength(wholeIds.length);
    streamed.mcprl!.logprobs.forEach((lp, i) => expect(lp).toBeCloseTo(wholeLogprobs[i], 5));
    expect(t.messages[3].mcprl!.token_ids).toEqual((second as Whole).choices[0].mcprl_token_ids);

    const r = await model.train([{ trajectories: [t, { ...t, reward: 0 }] }], { lr: 1e-3 });
    expect(r.trained).toBe(true);
    expect(r.retokenizedTurns).toBe(0);
  });
});
