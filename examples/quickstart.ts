/**
 * The library's loop in one file (docs/library.md shows this file; test/backend-docs.test.ts runs it;
 * `npm run example -- quickstart` runs it with progress, examples/run.ts).
 * A "say a number" task: the model is asked for a number between 1 and 9; the reward is 1 when its reply
 * starts with one. Any agent code and any reward work the same way.
 */
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, TrajectoryRecorder, type TrainResult } from '../src/index.js';

export async function quickstart(opts: { dir: string; baseModel: string; steps: number; onStep?: (r: TrainResult) => void }): Promise<TrainResult[]> {
  // 1. A trainable model: a base model plus a LoRA adapter, registered with a backend that serves it.
  const backend = new LocalBackend({ dir: opts.dir });
  const model = new TrainableModel({ project: 'quickstart', name: 'numbers', baseModel: opts.baseModel, lora: { rank: 4, alpha: 8 } });
  await model.register(backend);

  // 2. A rollout: the application's own agent code on the `openai` client, recorded, then scored.
  const rollout = async (task: string) => {
    const recorder = new TrajectoryRecorder();
    const client = model.openai({ fetch: recorder.fetch });
    const completion = await client.chat.completions.create({
      model: model.inferenceName,
      messages: [{ role: 'user', content: task }],
      max_tokens: 8,
    });
    const reply = completion.choices[0].message.content ?? '';
    return recorder.trajectory({ reward: /^\s*[1-9]/.test(reply) ? 1 : 0 });
  };

  // 3. The loop: gather groups (attempts at the same task), train one step on them, repeat.
  const tasks = ['Reply with one number from 1 to 9.', 'Free cells: 2, 5, 7. Reply with one free cell number.'];
  const results: TrainResult[] = [];
  try {
    for (let step = 0; step < opts.steps; step++) {
      const groups = await gatherTrajectoryGroups(tasks, rollout, { perGroup: 8, concurrency: 8, maxFailures: 2 });
      const result = await model.train(groups, { lr: 5e-3 });
      results.push(result);
      opts.onStep?.(result); // e.g. print the step's mean reward
    }
    await model.deleteCheckpoints(); // keeps the latest and the best
  } finally {
    await backend.close();
  }
  return results;
}
