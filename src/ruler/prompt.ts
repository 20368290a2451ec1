import type { ChatMessage } from '../agent/policy.js';
import type { McpTrajectory } from '../agent/trajectory.js';

/** ART's default RULER rubric, in its words: outcome first, then efficiency, proportional gaps, partial credit. */
export const DEFAULT_RUBRIC = [
  '- A trajectory that achieves its goal should always get a significantly higher score than a trajectory that does not achieve its goal.',
  '- A trajectory that achieves its goal more efficiently (e.g. by avoiding unproductive detours) should get a higher score than a trajectory that achieves its goal less efficiently.',
  '- If one trajectory is only slightly better than another, the difference in scores should be small. If it is significantly better, the difference in scores should be large.',
  '- You may give some partial credit for a trajectory that makes progress towards its goal but does not complete it.',
].join('\n');

/** The JSON schema of the judge's answer, for endpoints with structured output. */
export const RULER_RESPONSE_SCHEMA: Record<string, unknown> = {
  type: 'object',
  properties: {
    scores: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          trajectory_id: { type: 'string' },
          explanation: { type: 'string' },
          score: { type: 'number' },
        },
        required: ['trajectory_id', 'explanation', 'score'],
        additionalProperties: false,
      },
    },
  },
  required: ['scores'],
  additionalProperties: false,
};

/** What the judge sees of a message: the conversation, without token ids or other private fields. */
function judgeView(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls?.length) out.tool_calls = m.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
  if (m.role === 'tool') {
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    if (m.name !== undefined) out.name = m.name;
  }
  return out;
}

/** One line per message, so that the prompt is readable and each message appears as a unit. */
export function renderMessages(messages: ChatMessage[]): string {
  return messages.map((m) => JSON.stringify(judgeView(m))).join('\n');
}

/** A key equal for trajectories the judge could not tell apart. */
/**
 * What the judge reads of a trajectory: its messages and the tools it was offered. MCP rollouts and the
 * library's trajectories (src/backend) both have these.
 */
export interface JudgedTrajectory {
  messages: McpTrajectory['messages'];
  tools: readonly { function: { name: string; description?: string; parameters?: unknown } }[];
}

export function judgeKey(t: JudgedTrajectory): string {
  return renderMessages(t.messages);
}

/**
 * Length of the longest common message prefix, capped so that every trajectory keeps at least its last
 * message in its own part (an empty remainder gives the judge nothing to score).
 */
export function commonPrefixLength(lists: ChatMessage[][]): number {
  if (lists.length < 2) return 0;
  const rendered = lists.map((l) => l.map((m) => JSON.stringify(judgeView(m))));
  const cap = Math.min(...rendered.map((r) => r.length)) - 1;
  let n = 0;
  while (n < cap && rendered.every((r) => r[n] === rendered[0][n])) n++;
  return n;
}

export interface RulerPrompt {
  messages: { role: 'system' | 'user'; content: string }[];
  /** The ids the judge must score, in order. */
  ids: string[];
}

/**
 * Builds ART's RULER prompt: the shared goal and grading standards as the system message; the common
 * message prefix once as `<context>`, the tool list once (or per trajectory when they differ), then each
 * trajectory's remainder under its id.
 */
export function buildRulerPrompt(group: JudgedTrajectory[], rubric: string = DEFAULT_RUBRIC): RulerPrompt {
  const ids = group.map((_, i) => String(i + 1));
  const prefixLen = commonPrefixLength(group.map((t) => t.messages));
  const toolsJson = group.map((t) =>
    JSON.stringify(t.tools.map((x) => ({ name: x.function.name, description: x.function.description, parameters: x.function.parameters }))),
  );
  const sameTools = toolsJson.every((s) => s === toolsJson[0]);

  const system =
    "All of the trajectories below have been given the same goal. Your job is to consider each of them and give them a score between 0 and 1. Take into consideration your best judgement of the agent's goal.\n\n" +
    `Grading standards:\n${rubric.trim()}\n\n` +
    'Answer with a JSON object of the form {"scores": [{"trajectory_id": "<id>", "explanation": "<one or two sentences>", "score": <number from 0 to 1>}]} ' +
    `with exactly one entry for each of the ${group.length} trajectories, using their ids exactly as given.`;

  const parts: string[] = [];
  if (prefixLen > 0) parts.push(`<context>\n${renderMessages(group[0].messages.slice(0, prefixLen))}\n</context>`);
  if (sameTools && group.length > 0) parts.push(`<tools>\n${toolsJson[0]}\n</tools>`);
  parts.push('Trajectories:');
  group.forEach((t, i) => {
    const tools = sameTools ? '' : `<tools>\n${toolsJson[i]}\n</tools>\n`;
    parts.push(`<trajectory id="${ids[i]}">\n${tools}${renderMessages(t.messages.slice(prefixLen))}\n</trajectory>`);
  });
  return {
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: parts.join('\n\n') },
    ],
    ids,
  };
}
