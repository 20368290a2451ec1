/**
 * The worker-thread tokenizer gives the ids the caller's thread would (the real Qwen3 files), and an aborted job
 * replaces the worker without losing the jobs queued behind it. Jobs are held in the worker by a shared flag, so
 * nothing here depends on how long tokenising takes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3TokenizerDir } from '../../scripts/random-model.js';
import { HfTokenizer } from './tokenizer.js';

let tok: HfTokenizer;
beforeAll(async () => {
  tok = await HfTokenizer.load(qwen3TokenizerDir());
});
afterAll(() => tok.closeOffThread());

const TEXT =
  '<|im_start|>user\nGrüße aus Köln — 你好，世界! 😀 bk-0042, 12345.<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call><|im_end|>  \n\n\t tabs ';

const held = () => new Int32Array(new SharedArrayBuffer(4));
const release = (flag: Int32Array) => {
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
};

describe('HfTokenizer.encodeOffThread', () => {
  it('gives the same ids as encode, special tokens included', async () => {
    const long = TEXT.repeat(400);
    expect(await tok.encodeOffThread(long)).toEqual(tok.encode(long));
    expect(await tok.encodeOffThread('')).toEqual([]);
  });

  it('an aborted job is rejected and the worker replaced; the job queued behind it still gets its ids', async () => {
    const flag = held();
    const controller = new AbortController();
    const first = tok.encodeOffThread(TEXT, { signal: controller.signal, hold: flag });
    const second = tok.encodeOffThread(`${TEXT} second`);
    const before = tok.offThreadWorker!.workersStarted;
    controller.abort();
    await expect(first).rejects.toMatchObject({ code: 'TOKENIZE_ABORTED' });
    expect(await second).toEqual(tok.encode(`${TEXT} second`));
    expect(tok.offThreadWorker!.workersStarted).toBe(before + 1);
    release(flag);
    // An already aborted signal is refused at once.
    await expect(tok.encodeOffThread(TEXT, { signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'TOKENIZE_ABORTED' });
  });

  it('closeOffThread stops the worker and rejects its jobs; the next call starts a new one', async () => {
    const flag = held();
    const worker = (await tok.encodeOffThread('warm'), tok.offThreadWorker!);
    const pending = tok.encodeOffThread(TEXT, { hold: flag });
    tok.closeOffThread();
    await expect(pending).rejects.toMatchObject({ code: 'TOKENIZE_ABORTED' });
    expect(tok.offThreadWorker).toBeNull();
    release(flag);
    expect(await tok.encodeOffThread(TEXT)).toEqual(tok.encode(TEXT));
    expect(tok.offThreadWorker).not.toBe(worker);
  });
});
