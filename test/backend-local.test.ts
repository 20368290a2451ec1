/**
 * The library end to end on the real engine and the tiny model: the tic-tac-toe example (examples/) played
 * through a TrainableModel registered with a LocalBackend, its games recorded and trained on, over real HTTP
 * with the `openai` client.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendError, LocalBackend, readPeftAdapter, TrainableModel } from '../src/index.js';
import { gatherGames, probe, sameAnswer, TINY_MODEL, type Probe } from './backend-helpers.js';

const LR = 1e-2;
const settings = { project: 'test', name: 'ttt', baseModel: TINY_MODEL, lora: { rank: 4, alpha: 8, seed: 1 } };

describe('LocalBackend with the tic-tac-toe example', () => {
  let dir: string;
  let backend: LocalBackend;
  let model: TrainableModel;
  let lastProbe: Probe;
  let again: TrainableModel;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'mcprl-backend-'));
    backend = new LocalBackend({ dir });
    model = new TrainableModel(settings);
    await model.register(backend);
  });
  afterAll(async () => {
    await backend?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('registers at step 0: a fresh adapter, saved, served under the model name only', async () => {
    expect(model.step).toBe(0);
    expect((await model.checkpoints()).map((c) => c.step)).toEqual([0]);
    const ids = (await model.openai().models.list()).data.map((m) => m.id);
    expect(ids).toContain('ttt');
    expect(ids.filter((id) => id.startsWith('ttt@'))).toEqual([]);
    const p = await probe(model);
    expect(p.adapter).toBe('ttt@step-0');
  });

  it('trains on recorded games: the step, a PEFT checkpoint, finite metrics, and the served adapter changes', async () => {
    const before = await probe(model);
    const groups = await gatherGames(model, 1);
    // The recorder kept the sampled ids of every model turn.
    const turns = groups.flatMap((g) => g.trajectories.flatMap((t) => t.messages.filter((m) => m.role === 'assistant')));
    expect(turns.length).toBeGreaterThan(0);
    expect(turns.every((m) => m.mcprl && m.mcprl.token_ids.length > 0 && m.mcprl.logprobs.length === m.mcprl.token_ids.length)).toBe(true);

    const r = await model.train(groups, { lr: LR });
    expect(r.trained).toBe(true);
    expect(r.step).toBe(1);
    expect(model.step).toBe(1);
    expect(r.retokenizedTurns).toBe(0);
    expect(r.sequences).toBeGreaterThan(0);
    for (const k of ['loss', 'policyLoss', 'gradNorm', 'reward'] as const) expect(Number.isFinite(r[k])).toBe(true);
    expect(r.gradNorm).toBeGreaterThan(0);
    expect(Number.isFinite(r.metrics.legal_moves)).toBe(true);

    const adapter = await readPeftAdapter(r.checkpoint!);
    expect(adapter.config.peft_type).toBe('LORA');
    expect(adapter.config.r).toBe(4);
    const bs = [...adapter.tensors].filter(([k]) => k.endsWith('lora_B.weight'));
    expect(bs.length).toBeGreaterThan(0);
    expect(bs.some(([, t]) => t.data.some((x) => x !== 0))).toBe(true);

    const after = await probe(model);
    expect(after.adapter).toBe('ttt@step-1');
    expect(sameAnswer(before, after)).toBe(false);
  });

  it('holds a request sent while train() is pending and answers it with the new adapter', async () => {
    const groups = await gatherGames(model, 2);
    const pending = model.train(groups, { lr: LR });
    // Sent after train() was called, so it is held until the new adapter serves.
    const held = probe(model);
    const r = await pending;
    expect(r.trained).toBe(true);
    const answer = await held;
    expect(answer.adapter).toBe(`ttt@step-${r.step}`);
    lastProbe = await probe(model);
    expect(sameAnswer(answer, lastProbe)).toBe(true);
  });

  it('keeps the latest and the best checkpoint', async () => {
    const all = await model.checkpoints();
    expect(all.map((c) => c.step)).toEqual([0, 1, 2]);
    const scored = all.filter((c) => c.metrics.reward !== undefined);
    const best = scored.reduce((a, b) => (b.metrics.reward > a.metrics.reward ? b : a)).step;
    const deleted = await model.deleteCheckpoints();
    expect(deleted).toEqual(all.map((c) => c.step).filter((s) => s !== 2 && s !== best));
    expect((await model.checkpoints()).map((c) => c.step)).toEqual([...new Set([best, 2])].sort());
  });

  it('exports a checkpoint as a PEFT adapter under the backend folder', async () => {
    const out = await model.export();
    expect(out.step).toBe(2);
    expect(out.dir).toBe(join(dir, 'test', 'ttt', 'exports', 'peft-step-0002'));
    const exported = await readPeftAdapter(out.dir);
    const saved = await readPeftAdapter((await model.checkpoints()).at(-1)!.dir);
    expect([...exported.tensors.keys()].sort()).toEqual([...saved.tensors.keys()].sort());
    for (const [k, t] of saved.tensors) expect(exported.tensors.get(k)!.data).toEqual(t.data);
    const err = await model.export({ step: 7 }).catch((e: unknown) => e);
    expect((err as BackendError).field).toBe('options.step');
  });

  it('refuses other settings for the same model, naming the field', async () => {
    const other = new TrainableModel({ ...settings, lora: { ...settings.lora, rank: 8 } });
    const err = await other.register(backend).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as BackendError).code).toBe('BACKEND_CONFLICT');
    expect((err as BackendError).field).toBe('settings.lora.rank');
  });

  it('refuses a name that is served already: by another project, or as the base model', async () => {
    for (const clash of [{ project: 'other', name: 'ttt' }, { project: 'test', name: basename(TINY_MODEL) }]) {
      const err = await new TrainableModel({ ...settings, ...clash }).register(backend).catch((e: unknown) => e);
      expect((err as BackendError).code).toBe('BACKEND_CONFLICT');
      expect((err as BackendError).field).toBe('settings.name');
      expect(existsSync(join(dir, clash.project, clash.name))).toBe(false);
    }
  });

  it('rejects a malformed group, naming the field at fault', async () => {
    const err = await model.train([{ trajectories: [{ messages: [{ role: 'user', content: 'hi' }], reward: Number.NaN }] }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as BackendError).code).toBe('BACKEND_INVALID');
    expect((err as BackendError).field).toBe('groups.0.trajectories.0.reward');
  });

  it('tokenises turns without recorded ids, says how many, and runs SFT steps', async () => {
    const second = new TrainableModel({ ...settings, name: 'ttt-text' });
    // Two registrations at once load the model once (the second finds it registered).
    const twin = new TrainableModel({ ...settings, name: 'ttt-text' });
    await Promise.all([second.register(backend), twin.register(backend)]);
    expect([second.step, twin.step]).toEqual([0, 0]);
    const game = (reply: string, reward: number) => ({
      messages: [
        { role: 'user' as const, content: 'Free cells: 1, 2, 3. Reply with one free cell number.' },
        { role: 'assistant' as const, content: reply },
      ],
      reward,
    });
    const r = await second.train([{ trajectories: [game('2', 1), game('x', 0), game('9', 0)] }], { lr: LR });
    expect(r.trained).toBe(true);
    expect(r.retokenizedTurns).toBe(3);
    expect(second.step).toBe(1);
    // SFT on the same conversation: each step a checkpoint, and the loss falls.
    const example = { messages: [{ role: 'user' as const, content: 'Free cells: 1, 2, 3. Reply with one free cell number.' }, { role: 'assistant' as const, content: '2' }] };
    const s1 = await second.sft([example], { lr: 2e-2 });
    const s2 = await second.sft([example], { lr: 2e-2 });
    expect([s1.step, s2.step, second.step]).toEqual([2, 3, 3]);
    expect(s1.trained && s2.trained).toBe(true);
    expect(s1.retokenizedTurns).toBe(1);
    expect(s2.loss!).toBeLessThan(s1.loss!);
    expect((await second.checkpoints()).map((c) => c.step)).toEqual([0, 1, 2, 3]);
    // The first model is untouched by the second one's step.
    expect(sameAnswer(await probe(model), lastProbe)).toBe(true);
    await second.delete();
    expect(existsSync(join(dir, 'test', 'ttt-text'))).toBe(false);
    const ids = (await model.openai().models.list()).data.map((m) => m.id);
    expect(ids).not.toContain('ttt-text');
  });

  it('resumes from the newest checkpoint in a new backend on the same folder', async () => {
    await backend.close();
    backend = new LocalBackend({ dir });
    again = new TrainableModel(settings);
    await again.register(backend);
    expect(again.step).toBe(2);
    const p = await probe(again);
    expect(p.adapter).toBe('ttt@step-2');
    expect(sameAnswer(p, lastProbe)).toBe(true);
    expect(await readdir(join(dir, 'test'))).toEqual(['ttt']);
  });

  it('lets a request in flight finish on the adapter it began with, then unloads that adapter', async () => {
    const [engine] = backend.chatEngines();
    const began = `ttt@step-${again.step}`;
    const events = engine.stream({
      model: 'ttt',
      messages: [{ role: 'user', content: 'Free cells: 1, 2, 3. Reply with one free cell number.' }],
      sampling: { maxTokens: 64, seed: 1 },
    });
    // Its first event means the request has begun, on the adapter served then.
    let next = await events.next();
    expect(next.done).toBe(false);
    const r = await again.train(await gatherGames(again, 3), { lr: LR });
    expect(r.trained).toBe(true);
    while (!next.done) next = await events.next();
    expect(next.value.adapter).toBe(began);
    expect(engine.model.adapterNames()).not.toContain(began);
    expect((await probe(again)).adapter).toBe(`ttt@step-${r.step}`);
  });
});
