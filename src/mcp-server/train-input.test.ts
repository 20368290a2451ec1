import { describe, expect, it } from 'vitest';
import { trainConfigFrom, TrainSettingsSchema } from '../train/config.js';
import { settingsFromInput, TrainOptionsInput } from './train-input.js';

const snake = (k: string) => k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

describe("start_training's options, derived from TrainSettingsSchema", () => {
  it('has every setting but reward (an argument of its own) and maxStaleness (no rollout servers), in snake_case', () => {
    const keys = Object.keys(TrainSettingsSchema.shape).filter((k) => k !== 'reward' && k !== 'maxStaleness').map(snake);
    expect(Object.keys(TrainOptionsInput.shape).sort()).toEqual(keys.sort());
  });

  it('accepts a value for every setting and carries it into the run config', () => {
    const given = { rollouts_per_group: 3, groups_per_step: 2, updates_per_step: 2, lr: 1e-3, rank: 8, alpha: 16, targets: ['q_proj'], loss: 'dr_grpo', beta: 0.01,
      max_steps: 5, eval_every: 1, patience: 2, seed: 7, temperature: 0.7, val_temperature: 0.1, val_rollouts: 2, max_turns: 4, max_tokens: 64, concurrency: 2,
      lr_schedule: 'cosine', warmup_steps: 3, curriculum: 'pass_rate', curriculum_power: 2, curriculum_retire_after: 2, resample_rounds: 2, train_at_sampling_temperature: true, constrain_tool_calls: true, max_untrained_steps: 5,
      chat_template_kwargs: { enable_thinking: false }, tis_cap: 3, weight_dtype: 'f32', prefix_cache_mib: 256, kv_cache_mib: 4096, device: 'cpu' };
    expect(Object.keys(given).sort()).toEqual(Object.keys(TrainOptionsInput.shape).sort());
    const options = TrainOptionsInput.parse(given);
    const config = trainConfigFrom(settingsFromInput(options, 'checks'), { model: '/m', target: 't' });
    for (const [k, v] of Object.entries(given)) expect(config[k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()) as keyof typeof config], k).toEqual(v);
  });

  it('rejects an unknown enum value, an out-of-range value and an unknown key', () => {
    expect(TrainOptionsInput.safeParse({ loss: 'ppo' }).success).toBe(false);
    expect(TrainOptionsInput.safeParse({ rollouts_per_group: 1 }).success).toBe(false);
    expect(TrainOptionsInput.safeParse({ learning_rate: 1e-3 }).success).toBe(false);
    expect(TrainOptionsInput.safeParse({}).success).toBe(true);
  });
});
