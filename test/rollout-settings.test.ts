/**
 * The rollout settings are written once (src/agent/rollout-settings.ts) and each command's defaults stay what they
 * were: `mcprl train` 6 turns, 256 tokens, temperature 1 (validation 0), 8 at once; `mcprl eval` 10 turns, 4 at
 * once, tokens and temperature the endpoint's; the MCP tools greedy, 2 at once, training's limits for a bare model.
 */
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { AGENT_TOOL_ROLLOUT_DEFAULTS, EVAL_ROLLOUT_DEFAULTS, RolloutSettingsSchema, TRAIN_ROLLOUT_DEFAULTS } from '../src/agent/rollout-settings.js';
import { registerEval } from '../src/cli/eval.js';
import { TrainSettingsSchema } from '../src/train/config.js';

describe('rollout settings', () => {
  it('training parses to its defaults, with the shared fields and their help', () => {
    const s = TrainSettingsSchema.parse({});
    expect({ maxTurns: s.maxTurns, maxTokens: s.maxTokens, temperature: s.temperature, valTemperature: s.valTemperature, concurrency: s.concurrency })
      .toEqual({ maxTurns: 6, maxTokens: 256, temperature: 1, valTemperature: 0, concurrency: 8 });
    expect(TRAIN_ROLLOUT_DEFAULTS).toMatchObject({ maxTurns: 6, maxTokens: 256, temperature: 1, valTemperature: 0, concurrency: 8 });
    expect(TrainSettingsSchema.shape.maxTurns.description).toBe('assistant turns per rollout');
    expect(TrainSettingsSchema.shape.maxTokens.description).toBe('tokens per assistant turn');
    expect(TrainSettingsSchema.shape.concurrency.description).toBe('rollouts in flight at once');
    expect(TrainSettingsSchema.shape.temperature.description).toBe('sampling temperature of training rollouts');
    expect(() => TrainSettingsSchema.parse({ maxTurns: 0 })).toThrow();
    expect(() => TrainSettingsSchema.parse({ temperature: -1 })).toThrow();
  });

  it('mcprl eval keeps its own defaults and takes its help from the schema', () => {
    const cmd = registerEval(new Command());
    const opt = (flag: string) => cmd.options.find((o) => o.long === flag)!;
    expect(opt('--max-turns').defaultValue).toBe(10);
    expect(opt('--concurrency').defaultValue).toBe(4);
    expect(opt('--max-tokens').defaultValue).toBeUndefined();
    expect(opt('--temperature').defaultValue).toBeUndefined();
    expect(opt('--max-turns').description).toBe(RolloutSettingsSchema.shape.maxTurns.description);
    expect(EVAL_ROLLOUT_DEFAULTS).toEqual({ maxTurns: 10, concurrency: 4 });
  });

  it('the MCP tools answer greedily, with training\'s limits for a model without a run', () => {
    expect(AGENT_TOOL_ROLLOUT_DEFAULTS).toEqual({ maxTurns: 6, maxTokens: 256, temperature: 0, concurrency: 2 });
  });
});
