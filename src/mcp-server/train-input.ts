/**
 * start_training's training settings, derived from TrainSettingsSchema: the same fields, bounds, defaults and
 * descriptions, keyed in snake_case like the other tool arguments. Unknown keys are refused, so that a misspelt
 * setting is an error rather than a silent default.
 */
import { z } from 'zod';
import { TrainSettingsSchema, type TrainSettings } from '../train/config.js';

/**
 * Every setting but the reward mode, which start_training takes as an argument of its own (beside the judge), and
 * maxStaleness: the tool's runs have no rollout servers, and asynchronous rollouts need them.
 */
const SETTINGS = TrainSettingsSchema.omit({ reward: true, maxStaleness: true });

const snakeCase = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const KEY_OF = new Map(Object.keys(SETTINGS.shape).map((k) => [snakeCase(k), k]));

export const TrainOptionsInput = z.strictObject(Object.fromEntries(Object.entries(SETTINGS.shape).map(([k, field]) => [snakeCase(k), field])));

/** The settings named by start_training's `options` (snake_case) and `reward`, keyed as TrainSettingsSchema is. */
export function settingsFromInput(options: Record<string, unknown> | undefined, reward: TrainSettings['reward']): TrainSettings {
  const settings: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(options ?? {})) if (v !== undefined) settings[KEY_OF.get(k) ?? k] = v;
  return { ...settings, ...(reward !== undefined ? { reward } : {}) };
}
