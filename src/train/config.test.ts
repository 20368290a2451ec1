import { describe, expect, it } from 'vitest';
import { JudgeError } from '../ruler/judge.js';
import { parseTrainConfig, trainConfigFrom, TrainConfigSchema, TrainSettingsSchema } from './config.js';

const identity = { model: '/models/m', target: 'node server.js' };

describe('trainConfigFrom', () => {
  it('fills every default from the schema', () => {
    const c = trainConfigFrom({}, identity);
    expect(c).toMatchObject({ ...identity, reward: 'checks', rolloutsPerGroup: 4, groupsPerStep: 8, updatesPerStep: 1, lr: 5e-4, rank: 16, alpha: 32, loss: 'grpo', beta: 0, maxSteps: 20, valTemperature: 0 });
    expect(c.targets).toHaveLength(7);
    // What it returns is what config.json holds, and reads back the same.
    expect(parseTrainConfig(JSON.parse(JSON.stringify(c)), 'config.json')).toEqual(c);
  });

  it('decides the reward: blend with a judge, checks without; a judge-only mode without a judge is refused', () => {
    const judge = { baseURL: 'http://127.0.0.1:9/v1', model: 'j' };
    expect(trainConfigFrom({}, { ...identity, judge }).reward).toBe('blend');
    expect(trainConfigFrom({ reward: 'ruler' }, { ...identity, judge }).reward).toBe('ruler');
    expect(() => trainConfigFrom({ reward: 'ruler' }, identity, 'add --judge-model')).toThrow(new JudgeError('JUDGE_MISSING', 'reward ruler needs a judge: add --judge-model'));
    expect(() => trainConfigFrom({ reward: 'blend' }, identity)).toThrow(/needs a judge/);
  });

  it('refuses out-of-range settings with the field named', () => {
    expect(() => trainConfigFrom({ rolloutsPerGroup: 1 }, identity)).toThrow(/rolloutsPerGroup/);
    expect(() => trainConfigFrom({ loss: 'ppo' as never }, identity)).toThrow(/loss/);
    expect(() => parseTrainConfig({ ...identity, reward: 'checks', lr: -1 }, 'runs/x/config.json')).toThrow(/runs\/x\/config.json: lr/);
  });

  it('describes every setting (the help text and the tool schema come from it)', () => {
    for (const [key, field] of Object.entries(TrainSettingsSchema.shape)) expect(field.description, key).toMatch(/\w/);
    expect(Object.keys(TrainConfigSchema.shape)).toEqual(expect.arrayContaining([...Object.keys(TrainSettingsSchema.shape), 'model', 'target', 'judge']));
  });
});
