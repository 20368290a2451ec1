import { describe, expect, it } from 'vitest';
import type { JudgeClient } from '../ruler/judge.js';
import { rulerScoreGroup } from './ruler.js';

/**
 * A test double for the remote LLM judge (no LLM API can be reached here): it scores each trajectory in the
 * prompt by whether its answer says "4", and fails when asked to.
 */
function judge(opts: { fail?: boolean } = {}): JudgeClient & { prompts: string[] } {
  const prompts: string[] = [];
  return {
    model: 'judge-double',
    prompts,
    async complete(req) {
      const user = String(req.messages[req.messages.length - 1].content);
      prompts.push(user);
      if (opts.fail) throw Object.assign(new Error('judge down'), { status: 500 });
      const blocks = [...user.matchAll(/<trajectory id="(\d+)">([\s\S]*?)<\/trajectory>/g)];
      return JSON.stringify({ scores: blocks.map(([, id, body]) => ({ trajectory_id: id, explanation: `id ${id}`, score: /\b4\b/.test(body) ? 1 : 0.2 })) });
    },
  };
}

const attempt = (answer: string) => ({
  messages: [
    { role: 'user' as const, content: 'What is 2 + 2?' },
    { role: 'assistant' as const, content: answer },
  ],
  reward: 0,
  metrics: { turns: 1 },
});

describe('rulerScoreGroup (library reward helper)', () => {
  it("sets each trajectory's reward to the judge's score and keeps its explanation", async () => {
    const j = judge();
    const scored = await rulerScoreGroup({ trajectories: [attempt('5'), attempt('It is 4.'), attempt('5')] }, { judge: j });
    expect(scored!.trajectories.map((t) => t.reward)).toEqual([0.2, 1, 0.2]);
    expect(scored!.trajectories.map((t) => t.metrics)).toEqual([{ turns: 1, ruler: 0.2 }, { turns: 1, ruler: 1 }, { turns: 1, ruler: 0.2 }]);
    expect(scored!.trajectories[1].metadata.ruler_explanation).toBe('id 2');
    // The shared question is shown once as context; identical attempts are judged once.
    expect(j.prompts).toHaveLength(1);
    expect(j.prompts[0]).toContain('<context>');
    expect([...j.prompts[0].matchAll(/<trajectory id=/g)]).toHaveLength(2);
  });

  it('resolves with null when the judge fails every attempt', async () => {
    const scored = await rulerScoreGroup({ trajectories: [attempt('4'), attempt('5')] }, { judge: judge({ fail: true }), maxRetries: 1, backoffMs: 1 });
    expect(scored).toBeNull();
  });
});
