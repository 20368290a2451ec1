/** The one PEFT config definition: what it accepts, what it refuses, and the scale it implies. */
import { describe, expect, it } from 'vitest';
import { AdapterConfigSchema, loraScale, targetList, unsupportedFeature } from './peft.js';

const base = { peft_type: 'LORA', r: 4, lora_alpha: 8, target_modules: ['v_proj', 'q_proj'] };

describe('PEFT adapter config', () => {
  it('fills PEFT defaults and gives the scale α/r, or α/√r with rslora', () => {
    const c = AdapterConfigSchema.parse(base);
    expect(c).toMatchObject({ task_type: 'CAUSAL_LM', use_rslora: false, base_model_name_or_path: null });
    expect(loraScale(c)).toBe(2);
    expect(loraScale(AdapterConfigSchema.parse({ ...base, use_rslora: true }))).toBe(4);
  });

  it('lists target modules in the engine order, from a list or a PEFT regex, and refuses unknown or missing ones', () => {
    expect(targetList(AdapterConfigSchema.parse(base))).toEqual(['q_proj', 'v_proj']);
    expect(targetList(AdapterConfigSchema.parse({ ...base, target_modules: '.*\\.(k_proj|down_proj)' }))).toEqual(['k_proj', 'down_proj']);
    expect(() => targetList(AdapterConfigSchema.parse({ ...base, target_modules: ['lm_head'] }), 'ad')).toThrow(/ad: unsupported target module "lm_head"/);
    expect(() => targetList(AdapterConfigSchema.parse({ ...base, target_modules: null }), 'ad')).toThrow(/target_modules is missing/);
  });

  it('names what is not plain LoRA', () => {
    expect(unsupportedFeature(AdapterConfigSchema.parse({ ...base, bias: 'none', fan_in_fan_out: false }))).toBeNull();
    expect(unsupportedFeature(AdapterConfigSchema.parse({ ...base, use_dora: true }))).toBe('use_dora: true (DoRA)');
    expect(unsupportedFeature(AdapterConfigSchema.parse({ ...base, bias: 'all' }))).toBe('bias: "all"');
    expect(unsupportedFeature(AdapterConfigSchema.parse({ ...base, rank_pattern: { q_proj: 8 } }))).toBe('rank_pattern');
  });
});
