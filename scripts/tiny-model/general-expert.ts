/**
 * The scripted policy of the general recipe's warm-up: it solves an offline scenario of any server from the
 * scenario's checks alone, through the real rollout loop, so its transcripts carry the server's real tool list
 * and real outputs. The calls it makes, in order: each checked call (`tool_called`), and for a value the task asks
 * for, the call generation read it from (`answer_value`'s `via`). An argument neither stated in the task nor seen
 * in an earlier result (a chain: "the entity whose notes include "…"") is first looked up with the server's search
 * tool on the task's quoted phrase. It then reports the asked values, or "Done." when the task asked for none.
 * A scenario it cannot solve this way is left out of the warm-up (build.ts checks each transcript).
 *
 * The habits are those of the bookshop's expert (expert.ts): `guess` answers at once, `forget` does the work and
 * reports "Done." without the values.
 */
import type { Policy, PolicyRequest, PolicyTurn } from '../../src/agent/policy.js';
import type { Scenario } from '../../src/scenarios/index.js';
import { scriptedTurn, type Habit } from './expert.js';

type Call = { name: string; args: Record<string, unknown> };

/** The calls that solve `s`, in order, without lookups (see the module comment). */
export function plannedCalls(s: Scenario): Call[] {
  const out: Call[] = [];
  const seen = new Set<string>();
  const add = (c: Call) => {
    const key = `${c.name} ${JSON.stringify(c.args)}`;
    if (!seen.has(key)) out.push(c);
    seen.add(key);
  };
  for (const c of s.checks ?? []) {
    if (c.kind === 'tool_called') add({ name: c.tool, args: c.args });
    if (c.kind === 'answer_value' && c.via?.length) add({ name: c.via[0].tool, args: c.via[0].args });
  }
  return out;
}

/** Every string inside `v`, however deep. */
function strings(v: unknown): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(strings);
  if (v && typeof v === 'object') return Object.values(v).flatMap(strings);
  return [];
}

export class GeneralExpertPolicy implements Policy {
  readonly name = 'scripted-general-expert';
  private readonly plan: Call[];
  constructor(private readonly scenario: Scenario, private readonly habit: Habit = 'expert') {
    this.plan = plannedCalls(scenario);
  }

  async next(req: PolicyRequest): Promise<PolicyTurn> {
    const values = (this.scenario.checks ?? []).flatMap((c) => (c.kind === 'answer_value' || c.kind === 'answer_contains' ? [c.value] : []));
    return scriptedTurn(req, this.habit, () => this.nextCall(req), [...new Set(values)]);
  }

  private nextCall(req: PolicyRequest): Call | undefined {
    const task = this.scenario.task.toLowerCase();
    const seen = req.messages.filter((m) => m.role === 'tool').map((m) => String(m.content ?? '')).join('\n').toLowerCase();
    const made = req.messages.flatMap((m) => (m.role === 'assistant' ? (m.tool_calls ?? []).map((c) => `${c.function.name} ${c.function.arguments}`) : []));
    const c = this.plan.find((p) => !made.includes(`${p.name} ${JSON.stringify(p.args)}`));
    if (!c) return undefined;
    const unknown = strings(c.args).find((v) => !task.includes(v.toLowerCase()) && !seen.includes(v.toLowerCase()));
    const looked = made.length > 0 && !this.plan.some((p) => made[0] === `${p.name} ${JSON.stringify(p.args)}`);
    if (unknown !== undefined && !looked) {
      const phrase = /"([^"]+)"/.exec(this.scenario.task)?.[1];
      const search = req.tools.find((t) => /^(search|find|query)_/.test(t.function.name) && 'query' in ((t.function.parameters as { properties?: object }).properties ?? {}));
      if (phrase && search) return { name: search.function.name, args: { query: phrase } };
    }
    return c;
  }
}
