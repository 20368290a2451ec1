/**
 * The reason the coverage report gives a tool with no scenario: the stage its candidates stopped at most often, with
 * every stage counted, so that one try in another task's shape (a make → use whose write the reader never shows)
 * does not hide why the tool's own tries stopped. Notes are made on a real generation over the fixture server.
 */
import { describe, expect, it } from 'vitest';
import { connect, SafetyPolicy } from '../src/mcp/index.js';
import { ToolCoverageSchema } from '../src/scenarios/coverage.js';
import { startGeneration } from '../src/scenarios/offline/generation.js';
import { fixtureStdioTarget } from './helpers/servers.js';

describe('coverage reasons', () => {
  it('the commonest stage, every stage with its count, the detail of the reported stage', async () => {
    const session = await connect(fixtureStdioTarget(), { policy: new SafetyPolicy({}) });
    try {
      const g = await startGeneration(session, { seed: 1 });
      for (let i = 0; i < 3; i++) g.note('list_authors', 'nothing_to_ask');
      g.note('list_authors', 'replay_failed');
      g.note('get_book', 'no_discoverable_arguments', 'no isbn');
      g.note('get_book', 'calls_failed', 'boom');
      const of = (tool: string) => ToolCoverageSchema.parse(g.coverage([]).find((c) => c.tool === tool));
      expect(of('list_authors')).toMatchObject({ reason: 'nothing_to_ask', reasons: { nothing_to_ask: 3, replay_failed: 1 } });
      // Noted equally often: the furthest stage, with its own detail.
      expect(of('get_book')).toMatchObject({ reason: 'calls_failed', reasons: { no_discoverable_arguments: 1, calls_failed: 1 }, detail: 'boom' });
      // Never noted: not tried, with no counts.
      const untried = g.coverage([]).find((c) => c.tool === 'search_books')!;
      expect(untried.reason).toBe('not_tried');
      expect(untried.reasons).toBeUndefined();
    } finally {
      await session.close();
    }
  }, 60_000);
});
