/** The arguments naming the agent that answers (evaluate, run_agent), and the rollout settings' fields they take. */
import { z } from 'zod';
import { RolloutSettingsSchema } from '../../agent/rollout-settings.js';
import { TrainSettingsSchema } from '../../train/config.js';

/** The rollout settings' fields, which the tools' max_turns, max_tokens, temperature and concurrency are. */
export const rolloutFields = RolloutSettingsSchema.shape;

export const AgentInput = {
  run: z.string().optional().describe('A training run in the workspace: its base model and best (or latest) adapter'),
  checkpoint: z.enum(['best', 'latest']).optional().describe("With run: which checkpoint answers (default 'best')"),
  model: z.string().optional().describe('Instead of run: a Hugging Face model folder (workspace or --models root)'),
  adapter: z.string().optional().describe('With model: a PEFT adapter folder in the workspace'),
  // The training setting's own schema: the same values a run trains with are accepted here.
  chat_template_kwargs: TrainSettingsSchema.shape.chatTemplateKwargs.describe(
    'Chat template variables for every turn, e.g. {"enable_thinking": false}; over those the run trained with',
  ),
};
