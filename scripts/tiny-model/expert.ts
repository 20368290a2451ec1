/**
 * The habits of the scripted policy that writes the tiny model's warm-up transcripts (general-expert.ts), run
 * through the real rollout loop against the real server. With the `expert` habit it solves the scenario. The other
 * habits are the sloppy ones a pretrained model brings along with the skill, and that RL has to weed out
 * (docs/tiny-model.md): `guess` answers at once without looking anything up; `forget` does the lookups and then
 * reports "Done." without the values it found. A warm-up mixing them teaches the model how to use every tool, but
 * not that it should.
 */
import type { PolicyRequest, PolicyTurn } from '../../src/agent/policy.js';

export type Habit = 'expert' | 'guess' | 'forget';

/**
 * One turn of a scripted policy with a habit: its next call while the solution has one (`next`, not asked of a
 * guesser), then complete_task reporting `values` (or "Done." when it forgets them or has none).
 */
export function scriptedTurn(req: PolicyRequest, habit: Habit, next: () => { name: string; args: Record<string, unknown> } | undefined, values: string[]): PolicyTurn {
  const turn = req.messages.filter((m) => m.role === 'tool').length;
  const call = (name: string, args: Record<string, unknown>): PolicyTurn => ({
    content: null, toolCalls: [{ id: `call_${turn}`, name, arguments: JSON.stringify(args) }], finishReason: 'tool_calls',
  });
  if (habit === 'guess') return call('complete_task', { summary: "I don't know." });
  const n = next();
  if (n) return call(n.name, n.args);
  return call('complete_task', { summary: habit === 'forget' || values.length === 0 ? 'Done.' : values.join(', ') });
}
