import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { givenTrainSettings, TrainSettingsSchema, trainConfigFromOptions } from '../train/config.js';
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

  it('leaves numbers as the text given, checks enums as choices, and reads lists and JSON objects', () => {
    expect(parse(['--lr', '1e-3', '--rollouts-per-group', '8', '--loss', 'dr_grpo', '--targets', 'q_proj, v_proj'])).toEqual({
      lr: '1e-3', rolloutsPerGroup: '8', loss: 'dr_grpo', targets: ['q_proj', 'v_proj'],
    });
    expect(parse([])).toEqual({});
    expect(() => parse(['--loss', 'ppo'])).toThrow(/Allowed choices are grpo, dapo, dr_grpo, cispo, gspo/);
    expect(() => parse(['--reward', 'vibes'])).toThrow(/Allowed choices are ruler, checks, blend/);
    expect(parse(['--chat-template-kwargs', '{"enable_thinking": false}'])).toEqual({ chatTemplateKwargs: { enable_thinking: false } });
    expect(() => parse(['--chat-template-kwargs', '[1]'])).toThrow(/expected a JSON object/);
    expect(() => parse(['--chat-template-kwargs', '{enable_thinking'])).toThrow(/expected a JSON object/);
  });

  const identity = { model: '/m', target: 'node server.js' };
  const flag = (key: string) => `--${kebabCase(key)}`;
  const config = (args: string[]) => trainConfigFromOptions(parse(args), identity, 'add a judge', flag);

  it('carries --lr and --temperature through the one schema into the run config, read from their text', () => {
    const c = config(['--lr', '2e-4', '--temperature', '0.7', '--max-steps', '3']);
    expect(c).toMatchObject({ lr: 2e-4, temperature: 0.7, maxSteps: 3, rank: 16, reward: 'checks' });
    // The command line's other options are not settings: the schema drops them.
    expect(trainConfigFromOptions({ ...parse(['--lr', '2e-4']), json: true, runsDir: 'runs' }, identity, 'add a judge', flag)).not.toHaveProperty('json');
  });

  it("refuses a bad number naming its flag and the value given, with the schema's bounds", () => {
    expect(() => config(['--rollouts-per-group', '1'])).toThrow('--rollouts-per-group 1: Too small: expected number to be >=2');
    expect(() => config(['--lr', '0'])).toThrow('--lr 0: Too small: expected number to be >0');
    expect(() => config(['--max-steps', '2.5'])).toThrow(/^--max-steps 2\.5: .*int/);
    // Decimal notation only: Number() would read these as 16, 0 and Infinity.
    for (const text of ['0x10', '', 'Infinity']) expect(() => config(['--lr', text])).toThrow(`--lr ${JSON.stringify(text)}: expected a number`);
    expect(() => config(['--warmup-steps', ' '])).toThrow('--warmup-steps " ": expected a number');
  });

  it('reads the settings given again to a resumed run, filling in none', () => {
    expect(givenTrainSettings(parse(['--lr', '1e-3', '--loss', 'cispo']), flag)).toEqual({ lr: 1e-3, loss: 'cispo' });
    expect(() => givenTrainSettings(parse(['--temperature', '-1']), flag)).toThrow(/^--temperature -1: /);
  });
});
