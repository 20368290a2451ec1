/**
 * The supported architectures are written once per language: SUPPORTED_MODEL_TYPES in src/hf/config.ts (what
 * config.json is checked against, and what help texts name) and supported_model_types() in native/model/config.cc
 * (what the engine checks a ModelSpec against). The addon reports its list; the two must be the same, in order,
 * since both name it in their refusals.
 */
import { describe, expect, it } from 'vitest';
import { loadNative } from '../src/engine/native.js';
import { SUPPORTED_MODEL_TYPES } from '../src/hf/config.js';

describe('supported model types', () => {
  it('TypeScript and the native engine list the same architectures', () => {
    expect(loadNative().info().modelTypes).toEqual([...SUPPORTED_MODEL_TYPES]);
  });
});
