/**
 * A scripted expert: the policy that writes the tiny model's warm-up transcripts. It performs exactly the
 * scenario's checked tool calls, one per turn, then calls complete_task with the checked answer values. Run
 * through the real rollout loop against the real server, so its transcripts have the same system prompt, tool
 * list and tool outputs the model will meet in RL.
 */
import type { Policy, PolicyRequest, PolicyTurn } from '../../src/agent/policy.js';
import type { Scenario } from '../../src/scenarios/index.js';

export class ExpertPolicy implements Policy {
  readonly name = 'scripted-expert';
  constructor(private readonly scenario: Scenario) {}

  async next(req: PolicyRequest): Promise<PolicyTurn> {
    const calls = (this.scenario.checks ?? []).flatMap((c) => (c.kind === 'tool_called' ? [c] : []));
    const done = req.messages.filter((m) => m.role === 'tool').length;
    if (done < calls.length) {
      const c = calls[done];
      return { content: null, toolCalls: [{ id: `call_${done}`, name: c.tool, arguments: JSON.stringify(c.args) }], finishReason: 'tool_calls' };
    }
    const values = (this.scenario.checks ?? []).flatMap((c) => (c.kind === 'answer_contains' ? [c.value] : []));
    const summary = values.length > 0 ? values.join(', ') : 'Done.';
    return { content: null, toolCalls: [{ id: `call_${done}`, name: 'complete_task', arguments: JSON.stringify({ summary }) }], finishReason: 'tool_calls' };
  }
}
