/**
 * §2 of issue 12: a tool result larger than the model's context. The rollout loop cuts it (with a visible marker,
 * measured in the model's tokens) so that the next turn still fits, instead of the rollout failing with a context
 * error. Real parts: the bundled tiny model and its tokenizer in the real engine, the misbehaving test server's
 * `huge` tool over stdio. Only the first turn is scripted — the tiny model cannot be made to call `huge` on
 * purpose — and every later turn is the real engine's.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnginePolicy } from '../../src/agent/engine-policy.js';
import type { Policy } from '../../src/agent/policy.js';
import { rollout } from '../../src/agent/rollout.js';
import { ChatEngine } from '../../src/chat/chat-engine.js';
import { connect, type McpSession } from '../../src/mcp/index.js';
import { misbehavingStdioTarget, REPO_ROOT } from '../helpers/servers.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
let engine: ChatEngine;
let session: McpSession;

beforeAll(async () => {
  engine = await ChatEngine.load(MODEL, { threads: 1 });
  session = await connect(misbehavingStdioTarget(), { maxOutputChars: 200_000 });
});
afterAll(async () => {
  await session?.close();
  engine?.model.close();
});

describe('a tool result larger than the context', () => {
  it('is cut to fit with a marker, and the rollout goes on to the next turn without a context error', async () => {
    const real = new EnginePolicy(engine, { temperature: 0, maxTokens: 16 });
    let turns = 0;
    const policy: Policy = {
      name: 'first-turn-scripted',
      context: real.context,
      next: (req) => (turns++ === 0
        ? Promise.resolve({ content: null, toolCalls: [{ id: 'c1', name: 'huge', arguments: JSON.stringify({ chars: 150_000 }) }], finishReason: 'tool_calls' })
        : real.next(req)),
    };
    const tools = await session.listTools();
    const t = await rollout({ policy, session, tools, scenario: { id: 'big', task: 'Call huge.', difficulty: 1, source: 'schema' }, maxTurns: 2 });
    expect(t.error, t.logs.join('\n')).toBeUndefined();
    expect(t.metrics.turns).toBe(2);
    const result = t.messages.find((m) => m.role === 'tool')!;
    const marker = /…\[tool output cut by mcprl to fit the model's context: showing (\d+) of (\d+) tokens\]$/.exec(result.content!);
    expect(marker).not.toBeNull();
    const [kept, total] = [Number(marker![1]), Number(marker![2])];
    const window = engine.model.config.maxPositionEmbeddings!;
    expect(total).toBeGreaterThan(window);
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThan(window);
    // What the second turn was asked with fits the window with room for its reply.
    expect(real.context.room(t.messages.slice(0, 3), t.tools)).toBeGreaterThanOrEqual(0);
    fault('tool output larger than the context', 'cut with a marker; rollout continues', `kept ${kept} of ${total} tokens; turn 2 ran`);
  });
});
