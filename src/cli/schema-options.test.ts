import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { TrainSettingsSchema, trainConfigFrom } from '../train/config.js';
import { addSchemaOptions, kebabCase, optionsFromSchema, valuesFromOptions } from './schema-options.js';

/** Parses `args` with only the training settings' derived options; returns the settings commander read. */
function parse(args: string[]): Record<string, unknown> {
  const cmd = addSchemaOptions(new Command().exitOverride().configureOutput({ writeErr: () => undefined }), TrainSettingsSchema);
  cmd.parse(args, { from: 'user' });
  return valuesFromOptions(TrainSettingsSchema, cmd.opts());
}

describe('options derived from TrainSettingsSchema', () => {
  const options = optionsFromSchema(TrainSettingsSchema);
  const defaults = TrainSettingsSchema.parse({}) as Record<string, unknown>;

  it('has one option per schema field, with its description and the schema default in the help', () => {
    expect(options.map((o) => o.long)).toEqual(Object.keys(TrainSettingsSchema.shape).map((k) => `--${kebabCase(k)}`));
    for (const [key, field] of Object.entries(TrainSettingsSchema.shape)) {
      const o = options.find((x) => x.long === `--${kebabCase(key)}`)!;
      expect(field.description, key).toBeTruthy();
      expect(o.description, key).toContain(field.description!);
      const d = defaults[key];
      if (d !== undefined) expect(o.description, key).toContain(`(default: ${Array.isArray(d) ? d.join(',') : String(d)})`);
      // No commander default: a value not given stays undefined, so --resume can tell it from a default.
      expect(o.defaultValue, key).toBeUndefined();
    }
    expect(options.find((o) => o.long === '--lr')!.description).toContain('(default: 0.0005)');
  });

  it('parses values with the schema bounds, and enums as choices', () => {
    expect(parse(['--lr', '1e-3', '--rollouts-per-group', '8', '--loss', 'dr_grpo', '--targets', 'q_proj, v_proj'])).toEqual({
      lr: 1e-3, rolloutsPerGroup: 8, loss: 'dr_grpo', targets: ['q_proj', 'v_proj'],
    });
    expect(parse([])).toEqual({});
    expect(() => parse(['--rollouts-per-group', '1'])).toThrow(/expected an integer >= 2/);
    expect(() => parse(['--lr', '0'])).toThrow(/expected a positive number/);
    expect(() => parse(['--max-steps', '2.5'])).toThrow(/expected an integer >= 0/);
    expect(() => parse(['--loss', 'ppo'])).toThrow(/Allowed choices are grpo, dapo, dr_grpo, cispo, gspo/);
    expect(() => parse(['--reward', 'vibes'])).toThrow(/Allowed choices are ruler, checks, blend/);
    expect(parse(['--chat-template-kwargs', '{"enable_thinking": false}'])).toEqual({ chatTemplateKwargs: { enable_thinking: false } });
    expect(() => parse(['--chat-template-kwargs', '[1]'])).toThrow(/expected a JSON object/);
    expect(() => parse(['--chat-template-kwargs', '{enable_thinking'])).toThrow(/expected a JSON object/);
  });

  it('carries --lr through the one schema into the run config', () => {
    const config = trainConfigFrom(parse(['--lr', '2e-4']), { model: '/m', target: 'node server.js' });
    expect(config.lr).toBe(2e-4);
    expect(config.rank).toBe(16);
    expect(config.reward).toBe('checks');
  });
});
