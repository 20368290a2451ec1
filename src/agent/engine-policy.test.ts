/**
 * The in-process policy on a scripted model (a real model whose weights make it write one known reply; see
 * test/helpers/scripted-model.ts), so that tool calls, invalid calls and token ids can be checked exactly.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../../scripts/random-model.js';
import { makeScriptedModel } from '../../test/helpers/scripted-model.js';
import { PolicyError, type OpenAITool, type PolicyRequest } from './policy.js';
import { ChatEngine } from '../chat/chat-engine.js';
import { EnginePolicy } from './engine-policy.js';
import type { Model } from '../engine/model.js';
import { HfTokenizer } from '../chat/tokenizer.js';

const REPLY = 'Let me check.<tool_call>{"name":"lookup","arguments":{"q":1}}</tool_call>';
let dir: string;
let engine: ChatEngine;
let replyIds: number[];

const tools: OpenAITool[] = [{ type: 'function', function: { name: 'lookup', description: 'Look up', parameters: { type: 'object', properties: {} } } }];
const request: PolicyRequest = { messages: [{ role: 'user', content: 'Find q.' }], tools };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-policy-'));
  const tok = await HfTokenizer.load(qwen3TokenizerDir());
  replyIds = tok.encode(REPLY + '<|im_end|>');
  await makeScriptedModel(join(dir, 'scripted'), [tok.encode('\n')[0], ...replyIds]);
  engine = await ChatEngine.load(join(dir, 'scripted'));
});

afterAll(async () => {
  (engine?.model as Model | undefined)?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('EnginePolicy', () => {
  it('returns tool calls with the exact sampled token ids and their logprobs', async () => {
    const policy = new EnginePolicy(engine);
    expect(policy.name).toBe('scripted');
    const turn = await policy.next(request);
    expect(turn.content).toBe('Let me check.');
    expect(turn.toolCalls).toHaveLength(1);
    expect(turn.toolCalls[0]).toMatchObject({ name: 'lookup', arguments: '{"q": 1}' });
    expect(turn.finishReason).toBe('tool_calls');
    expect(turn.tokenIds).toEqual(replyIds);
    expect(turn.logprobs).toHaveLength(replyIds.length);
    // The scripted chain has a logit margin of ~60, so each token is all but certain.
    for (const lp of turn.logprobs!) expect(lp).toBeGreaterThan(-1e-3);
    expect(turn.invalidToolCalls).toBeUndefined();
  });

  it('keeps the mcprl field of earlier turns out of the prompt', async () => {
    const policy = new EnginePolicy(engine);
    const first = await policy.next(request);
    const turn = await policy.next({
      tools,
      messages: [
        ...request.messages,
        {
          role: 'assistant',
          content: first.content,
          tool_calls: first.toolCalls.map((t) => ({ id: t.id, type: 'function' as const, function: { name: t.name, arguments: t.arguments } })),
          mcprl: { token_ids: first.tokenIds!, logprobs: first.logprobs! },
        },
        { role: 'tool', tool_call_id: first.toolCalls[0].id, content: 'q is 1' },
      ],
    });
    expect(turn.tokenIds).toEqual(replyIds);
  });

  it('reports a malformed (cut-off) call as invalid rather than failing', async () => {
    const turn = await new EnginePolicy(engine, { maxTokens: 8 }).next(request);
    expect(turn.finishReason).toBe('length');
    expect(turn.toolCalls).toEqual([]);
    expect(turn.invalidToolCalls).toHaveLength(1);
    expect(turn.invalidToolCalls![0]).toMatchObject({ raw: '{"name":"', error: expect.stringMatching(/unterminated/) });
    expect(turn.tokenIds).toEqual(replyIds.slice(0, 8));
  });

  it('fails with typed policy errors for an unknown model and an aborted turn', async () => {
    const unknown = await new EnginePolicy(engine, { model: 'nope' }).next(request).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(PolicyError);
    expect(unknown).toMatchObject({ code: 'POLICY_HTTP', status: 404 });

    const controller = new AbortController();
    controller.abort();
    const aborted = await new EnginePolicy(engine).next({ ...request, signal: controller.signal }).catch((e: unknown) => e);
    expect(aborted).toBeInstanceOf(PolicyError);
    expect(aborted).toMatchObject({ code: 'POLICY_ABORTED' });
  });
});
