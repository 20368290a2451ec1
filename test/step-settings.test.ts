/**
 * The library owns its step and adapter settings (src/train/step-settings.ts): the library's schemas take them as
 * they are, the MCP·RL job's settings extend them, and no library file takes anything from the job's settings.
 * The learning-rate schedule is computed there too, once, by the library's step loop (not by the trainer).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LoraSettingsSchema, TrainStepConfigSchema } from '../src/backend/schemas.js';
import { TrainSettingsSchema } from '../src/train/config.js';
import { AdapterSettingsSchema, learningRate, LrScheduleSchema, StepSettingsSchema, type LrSchedule } from '../src/train/step-settings.js';
import { REPO_ROOT } from './helpers/servers.js';

describe('the library\'s step settings', () => {
  it('are the fields of the library\'s step and adapter schemas, one object each', () => {
    const step = TrainStepConfigSchema.shape;
    for (const k of ['lr', 'loss', 'beta', 'updates'] as const) expect(step[k], k).toBe(StepSettingsSchema.shape[k]);
    expect(LoraSettingsSchema).toBe(AdapterSettingsSchema);
  });

  it('are extended by the MCP·RL job\'s settings, with the same defaults and help texts', () => {
    const job = TrainSettingsSchema.shape;
    const s = StepSettingsSchema.shape;
    const a = AdapterSettingsSchema.shape;
    expect(job.lr).toBe(s.lr);
    expect(job.loss).toBe(s.loss);
    expect(job.beta).toBe(s.beta);
    expect(job.updatesPerStep).toBe(s.updates);
    for (const k of ['rank', 'alpha', 'targets', 'seed'] as const) expect(job[k], k).toBe(a[k]);
    expect(TrainSettingsSchema.parse({})).toMatchObject({ lr: 5e-4, loss: 'grpo', beta: 0, updatesPerStep: 1, rank: 16, alpha: 32, seed: 1 });
  });

  it('no file of the library (src/backend) imports the job\'s settings (src/train/config.ts)', () => {
    const dir = join(REPO_ROOT, 'src', 'backend');
    const offenders = readdirSync(dir).filter((f) => f.endsWith('.ts'))
      .filter((f) => /from ['"]\.\.\/train\/config\.js['"]/.test(readFileSync(join(dir, f), 'utf8')));
    expect(offenders).toEqual([]);
  });
});

describe('the learning-rate schedule, computed once in TypeScript', () => {
  const lr = (kind: LrSchedule['kind'], step: number, warmupSteps = 0, totalSteps?: number) => learningRate({ kind, warmupSteps, totalSteps }, 1e-3, step);
  it('constant, linear warm-up, warm-up + cosine to zero', () => {
    expect(lr('constant', 0)).toBe(1e-3);
    expect(lr('constant', 99, 4)).toBe(1e-3);
    expect(lr('warmup', 0, 4)).toBeCloseTo(0.25e-3, 12);
    expect(lr('warmup', 3, 4)).toBeCloseTo(1e-3, 12);
    expect(lr('warmup', 10, 4)).toBeCloseTo(1e-3, 12);
    expect(lr('cosine', 0, 2, 12)).toBeCloseTo(0.5e-3, 12);
    expect(lr('cosine', 1, 2, 12)).toBeCloseTo(1e-3, 12);
    expect(lr('cosine', 2, 2, 12)).toBeCloseTo(1e-3, 12);
    expect(lr('cosine', 7, 2, 12)).toBeCloseTo(0.5e-3, 12);
    expect(lr('cosine', 12, 2, 12)).toBeCloseTo(0, 12);
    expect(lr('cosine', 20, 2, 12)).toBeCloseTo(0, 12);
  });

  it('a cosine schedule without its last step is refused where it is given', () => {
    expect(() => LrScheduleSchema.parse({ kind: 'cosine', warmupSteps: 2 })).toThrow('cosine schedule needs totalSteps');
    expect(LrScheduleSchema.parse(undefined)).toEqual({ kind: 'constant', warmupSteps: 0 });
  });
});
