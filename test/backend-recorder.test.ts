/**
 * The recorder on a tool-calling agent, with the real engine: a scripted model (test/helpers/scripted-model.ts)
 * that always answers with the same tool call, served by a LocalBackend. Two turns with the same text must each
 * keep their own sampled ids, matched by tool-call id.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../scripts/random-model.js';
import { HfTokenizer } from '../src/chat/tokenizer.js';
import { BackendError, LocalBackend, TrainableModel, TrajectoryRecorder } from '../src/index.js';
import { makeScriptedModel } from './helpers/scripted-model.js';

const REPLY = 'Let me check.<tool_call>{"name":"lookup","arguments":{"q":1}}</tool_call>';
const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'lookup', description: 'Look something up', parameters: { type: 'object', properties: { q: { type: 'integer' } } } } },
];
type Completion = OpenAI.Chat.Completions.ChatCompletion & { choices: { mcprl_token_ids: number[] }[] };

describe('TrajectoryRecorder', () => {
  let dir: string;
  let backend: LocalBackend;
  let model: TrainableModel;
  let replyIds: number[];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-recorder-'));
    const tok = await HfTokenizer.load(qwen3TokenizerDir());
    replyIds = tok.encode(REPLY + '<|im_end|>');
    await makeScriptedModel(join(dir, 'scripted'), [tok.encode('\n')[0], ...replyIds]);
    backend = new LocalBackend({ dir: join(dir, 'backend') });
    model = new TrainableModel({ project: 'rec', name: 'agent', baseModel: join(dir, 'scripted'), lora: { rank: 2, alpha: 4 } });
    await model.register(backend);
  });
  afterAll(async () => {
    await backend?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps each tool-calling turn with its own sampled ids and logprobs, and the trajectory trains without re-tokenising', async () => {
    const recorder = new TrajectoryRecorder();
    const client = model.openai({ fetch: recorder.fetch, maxRetries: 0 });
    const history: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Find q.' }];
    const completions: Completion[] = [];
    for (let turn = 0; turn < 2; turn++) {
      // The agent asks for no logprobs; the recorder does.
      const c = (await client.chat.completions.create({ model: model.inferenceName, messages: history, tools, temperature: 0, max_tokens: 64 })) as Completion;
      completions.push(c);
      const call = c.choices[0].message.tool_calls![0];
      history.push(c.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"answer": 42}' });
    }
    const t = recorder.trajectory({ reward: 1 });
    expect(t.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    const turns = [t.messages[1], t.messages[3]];
    turns.forEach((m, k) => {
      expect(m.tool_calls![0].id).toBe(completions[k].choices[0].message.tool_calls![0].id);
      expect(m.mcprl!.token_ids).toEqual(completions[k].choices[0].mcprl_token_ids);
      expect(m.mcprl!.token_ids).toEqual(replyIds);
      expect(m.mcprl!.logprobs).toHaveLength(replyIds.length);
    });
    expect(turns[0].tool_calls![0].id).not.toBe(turns[1].tool_calls![0].id);
    expect(t.tools).toEqual(tools);

    const r = await model.train([{ trajectories: [t, { ...t, reward: 0 }] }], { lr: 1e-3 });
    expect(r.trained).toBe(true);
    expect(r.retokenizedTurns).toBe(0);
  });

  it('records a streamed tool-calling turn with its sampled ids, and refuses an empty recording with RECORDER', async () => {
    const recorder = new TrajectoryRecorder();
    expect(() => recorder.trajectory({ reward: 0 })).toThrow(BackendError);
    const client = model.openai({ fetch: recorder.fetch, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: model.inferenceName,
      messages: [{ role: 'user', content: 'Find q.' }],
      tools,
      temperature: 0,
      max_tokens: 64,
      stream: true,
    });
    const streamedIds: number[] = [];
    let callId = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0] as (typeof chunk.choices)[0] & { mcprl_token_ids?: number[] };
      streamedIds.push(...(c?.mcprl_token_ids ?? []));
      callId = c?.delta.tool_calls?.[0]?.id ?? callId;
    }
    expect(streamedIds).toEqual(replyIds);
    expect(recorder.calls).toHaveLength(1);
    const t = recorder.trajectory({ reward: 1 });
    expect(t.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    const turn = t.messages[1];
    expect(turn.tool_calls).toHaveLength(1);
    expect(turn.tool_calls![0]).toMatchObject({ id: callId, type: 'function', function: { name: 'lookup' } });
    expect(JSON.parse(turn.tool_calls![0].function.arguments)).toEqual({ q: 1 });
    expect(turn.mcprl!.token_ids).toEqual(replyIds);
    expect(turn.mcprl!.logprobs).toHaveLength(replyIds.length);
  });
});
