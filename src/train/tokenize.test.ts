/**
 * Training sequences from trajectories, on a real (random-weight) Qwen3-shaped model folder with the real Qwen3
 * tokenizer and chat template: every masked span must be exactly an assistant turn, in exactly the context the
 * engine renders for generation.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { makeRandomModel } from '../../scripts/random-model.js';
import type { ChatMessage, OpenAITool } from '../agent/policy.js';
import { ChatEngine } from '../chat/chat-engine.js';
import { tokenizationReport, trajectoryToSequences } from './tokenize.js';

let dir: string;
let engine: ChatEngine;
const tools: OpenAITool[] = [{ type: 'function', function: { name: 'get_book', description: 'Get a book', parameters: { type: 'object', properties: { book_id: { type: 'string' } }, required: ['book_id'] } } }];
const call = { id: 'c1', type: 'function' as const, function: { name: 'get_book', arguments: '{"book_id": "bk-001"}' } };
const base: ChatMessage[] = [
  { role: 'system', content: 'Use the tools.' },
  { role: 'user', content: 'Price of bk-001?' },
];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'mcprl-tokenize-'));
  await makeRandomModel(join(dir, 'm'), { arch: 'qwen3', hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1, headDim: 16, intermediateSize: 32 });
  engine = await ChatEngine.load(join(dir, 'm'));
});

afterAll(async () => {
  (engine?.model as { close(): void } | undefined)?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const spans = (seq: { tokenIds: number[]; mask: number[] }) => {
  const out: number[][] = [];
  seq.mask.forEach((m, t) => {
    if (m === 1 && (t === 0 || seq.mask[t - 1] === 0)) out.push([]);
    if (m === 1) out[out.length - 1].push(seq.tokenIds[t]);
  });
  return out;
};

describe('trajectoryToSequences', () => {
  it('uses sampled token ids verbatim, with their logprobs, after the exact generation prompt', () => {
    const sampled = engine.tokenizer.encode('<tool_call>\n{"name": "get_book", "arguments": {"book_id": "bk-001"}}\n</tool_call><|im_end|>');
    const lps = sampled.map((_, k) => -0.01 * (k + 1));
    const messages: ChatMessage[] = [...base, { role: 'assistant', content: null, tool_calls: [call], mcprl: { token_ids: sampled, logprobs: lps } }];
    const seqs = trajectoryToSequences(engine, { messages, tools }, 0.5);
    expect(seqs).toHaveLength(1);
    const [s] = seqs;
    const prompt = engine.promptIds({ messages: base, tools });
    expect(s.tokenIds).toEqual([...prompt, ...sampled]);
    expect(s.mask).toEqual([...prompt.map(() => 0), ...sampled.map(() => 1)]);
    expect(s.oldLogprobs!.slice(prompt.length)).toEqual(lps);
    expect(s.advantage).toBe(0.5);
  });

  it('trains each sampled turn at the temperature its logprobs are at, never two temperatures in one sequence', () => {
    const first = engine.tokenizer.encode('<tool_call>\n{"name": "get_book", "arguments": {"book_id": "bk-001"}}\n</tool_call><|im_end|>');
    const second = engine.tokenizer.encode('It costs 12.99 USD.<|im_end|>');
    const turns = (t1: number | undefined, t2: number | undefined): ChatMessage[] => [
      ...base,
      { role: 'assistant', content: null, tool_calls: [call], mcprl: { token_ids: first, logprobs: first.map(() => -0.1), ...(t1 ? { temperature: t1 } : {}) } },
      { role: 'tool', tool_call_id: 'c1', content: '{"price_usd": 12.99}' },
      { role: 'assistant', content: 'It costs 12.99 USD.', mcprl: { token_ids: second, logprobs: second.map(() => -0.2), ...(t2 ? { temperature: t2 } : {}) } },
    ];
    const same = trajectoryToSequences(engine, { messages: turns(0.7, 0.7), tools });
    expect(same.every((s) => s.temperature === 0.7)).toBe(true);
    expect(same.flatMap(spans)).toHaveLength(2);
    const mixed = trajectoryToSequences(engine, { messages: turns(0.7, 1.3), tools });
    expect(mixed.map((s) => s.temperature)).toEqual([0.7, 1.3]);
    expect(mixed.map((s) => spans(s).length)).toEqual([1, 1]);
    // Logprobs of the model at temperature 1 (no `temperature` recorded) train at temperature 1.
    expect(trajectoryToSequences(engine, { messages: turns(undefined, undefined), tools }).every((s) => s.temperature === undefined)).toBe(true);
  });

  it('masks exactly the template-rendered assistant turns of a multi-turn transcript, ending at <|im_end|>', () => {
    const messages: ChatMessage[] = [
      ...base,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'c1', content: '{"price_usd": 12.99}' },
      { role: 'assistant', content: 'It costs 12.99 USD.' },
    ];
    const seqs = trajectoryToSequences(engine, { messages, tools });
    const all = seqs.flatMap(spans).map((ids) => engine.tokenizer.decode(ids, { skipSpecialTokens: false }));
    expect(all).toHaveLength(2);
    expect(all[0]).toContain('"book_id": "bk-001"');
    expect(all[0].endsWith('<|im_end|>')).toBe(true);
    expect(all[1]).toContain('It costs 12.99 USD.');
    expect(all[1].endsWith('<|im_end|>')).toBe(true);
    for (const s of seqs) {
      expect(s.mask[0]).toBe(0);
      expect(s.oldLogprobs).toBeUndefined();
      // Each sequence starts with the generation prompt of its first assistant turn.
      expect(engine.tokenizer.decode(s.tokenIds.slice(0, 3), { skipSpecialTokens: false })).toContain('<|im_start|>');
    }
    // The second turn's context is the engine's own prompt for it, token for token.
    const prompt2 = engine.promptIds({ messages: messages.slice(0, 4), tools });
    const last = seqs[seqs.length - 1];
    const firstMasked = last.mask.lastIndexOf(0) + 1;
    expect(last.tokenIds.slice(firstMasked - prompt2.length, firstMasked)).toEqual(prompt2);
  });
});

describe('tokenizationReport', () => {
  it('counts re-tokenised turns and turns whose sampled ids differ from the re-tokenisation', () => {
    const text: ChatMessage = { role: 'assistant', content: 'It costs 12.' };
    // The ids the trainer's template and tokenizer give the turn, taken from a trajectory without ids.
    const [seq] = trajectoryToSequences(engine, { messages: [...base, text], tools });
    const rendered = spans(seq)[0];
    const withIds = (ids: number[]): ChatMessage => ({ ...text, mcprl: { token_ids: ids, logprobs: ids.map(() => -1) } });
    const report = tokenizationReport(engine, [
      { messages: [...base, text], tools }, // no ids: re-tokenised
      { messages: [...base, withIds(rendered)], tools }, // ids as the trainer would produce them
      { messages: [...base, withIds([...rendered.slice(0, -1), rendered.at(-1)! === 0 ? 1 : 0])], tools }, // sampled otherwise
    ]);
    expect(report).toEqual({ turns: 3, retokenized: 1, differs: 1 });
  });

  /**
   * A transcript of `n` tool-calling turns and a final answer, each turn with ids as a model that does not think
   * samples them (Qwen3's template renders such history turns without a think block, the last turn with an empty one).
   */
  const transcript = (n: number): ChatMessage[] => {
    const callIds = engine.tokenizer.encode('<tool_call>\n{"name": "get_book", "arguments": {"book_id": "bk-001"}}\n</tool_call><|im_end|>');
    const messages: ChatMessage[] = [...base];
    for (let k = 0; k < n; k++) {
      messages.push({ role: 'assistant', content: null, tool_calls: [{ ...call, id: `c${k}` }], mcprl: { token_ids: callIds, logprobs: callIds.map(() => -1) } });
      messages.push({ role: 'tool', tool_call_id: `c${k}`, content: `{"price_usd": ${k}}` });
    }
    const answer: ChatMessage = { role: 'assistant', content: 'It costs 12.99 USD.' };
    // The last turn's ids as the template renders it last (what re-tokenising would train on).
    const last = spans(trajectoryToSequences(engine, { messages: [...messages, answer], tools }).at(-1)!).at(-1)!;
    return [...messages, { ...answer, mcprl: { token_ids: last, logprobs: last.map(() => -1) } }];
  };

  it('finds drift in any turn of a multi-turn transcript: in the history the next prompt renders, or in the last turn', () => {
    const messages = transcript(3);
    expect(tokenizationReport(engine, [{ messages, tools }])).toEqual({ turns: 4, retokenized: 0, differs: 0 });
    const off = (i: number): ChatMessage[] => messages.map((m, k) => {
      if (k !== i) return m;
      const ids = [...m.mcprl!.token_ids];
      ids[2] = ids[2] === 0 ? 1 : 0;
      return { ...m, mcprl: { ...m.mcprl!, token_ids: ids } };
    });
    const assistants = messages.flatMap((m, k) => (m.role === 'assistant' ? [k] : []));
    for (const i of assistants) expect(tokenizationReport(engine, [{ messages: off(i), tools }]), `turn at ${i}`).toEqual({ turns: 4, retokenized: 0, differs: 1 });
  });

  it('costs a tokenisation two template renders per trajectory, whatever its number of turns, when nothing drifts', () => {
    // Counts the chat template's renders on the engine's template (a structural hook).
    const renders = vi.spyOn(engine.template, 'render');
    try {
      const extra = (n: number) => {
        const t = { messages: transcript(n), tools };
        expect(tokenizationReport(engine, [t])).toEqual({ turns: n + 1, retokenized: 0, differs: 0 });
        renders.mockClear();
        trajectoryToSequences(engine, t, 0);
        const plain = renders.mock.calls.length;
        renders.mockClear();
        trajectoryToSequences(engine, t, 0, { report: { turns: 0, retokenized: 0, differs: 0 } });
        return renders.mock.calls.length - plain;
      };
      expect(extra(1)).toBe(2);
      expect(extra(6)).toBe(2);
    } finally {
      renders.mockRestore();
    }
  });
});
