/**
 * The scripted policy that writes the tiny model's warm-up transcripts, run through the real rollout loop against
 * the real server, so its transcripts have the same system prompt, tool list and tool outputs the model meets in RL.
 *
 * With the `expert` habit it solves the scenario: when a checked call needs an id the task does not state (a
 * chain: "the book "The Distant Comet""), it first looks the entity up by the quoted label (search_books, or
 * list_authors), copies the id from that result, performs the checked calls one per turn (a flow's later call
 * takes its value from the earlier call's output), then calls complete_task with the looked-up answer values.
 *
 * The other habits are the sloppy ones a pretrained model brings along with the skill, and that RL has to weed
 * out (docs/tiny-model.md): `guess` answers at once without looking anything up; `forget` does the lookups and
 * then reports "Done." without the values it found. A warm-up mixing them teaches the model how to use every
 * tool, but not that it should.
 */
import type { Policy, PolicyRequest, PolicyTurn } from '../../src/agent/policy.js';
import type { Scenario } from '../../src/scenarios/index.js';

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

export class ExpertPolicy implements Policy {
  readonly name = 'scripted-expert';
  constructor(private readonly scenario: Scenario, private readonly habit: Habit = 'expert') {}

  async next(req: PolicyRequest): Promise<PolicyTurn> {
    const values = (this.scenario.checks ?? []).flatMap((c) => (c.kind === 'answer_contains' ? [c.value] : []));
    return scriptedTurn(req, this.habit, () => this.nextCall(req), values);
  }

  /** The next call of the solution, given the tool results so far; undefined when every checked call is done. */
  private nextCall(req: PolicyRequest): { name: string; args: Record<string, unknown> } | undefined {
    const task = this.scenario.task.toLowerCase();
    const seen = req.messages.filter((m) => m.role === 'tool').map((m) => String(m.content ?? '')).join('\n').toLowerCase();
    const made = req.messages.flatMap((m) => (m.role === 'assistant' ? (m.tool_calls ?? []).map((c) => c.function.name) : []));
    const checked = (this.scenario.checks ?? []).flatMap((c) => (c.kind === 'tool_called' ? [c] : []));
    const done = checked.filter((c) => made.includes(c.tool)).length;
    if (done >= checked.length) return undefined;
    const c = checked[done];
    const unknown = Object.entries(c.args).find(([, v]) => !task.includes(String(v).toLowerCase()) && !seen.includes(String(v).toLowerCase()));
    if (unknown && done === 0) {
      const label = /"([^"]+)"/.exec(this.scenario.task)?.[1];
      if (!label) throw new Error(`scenario ${this.scenario.id}: ${c.tool}.${unknown[0]} is neither stated nor findable`);
      if (unknown[0] === 'book_id') return { name: 'search_books', args: { query: label } };
      if (unknown[0] === 'author_id') return { name: 'list_authors', args: {} };
      throw new Error(`scenario ${this.scenario.id}: no lookup known for ${c.tool}.${unknown[0]}`);
    }
    return { name: c.tool, args: c.args };
  }
}
