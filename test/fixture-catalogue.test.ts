import { describe, expect, it } from 'vitest';
import { connect } from '../src/mcp/index.js';
import { AUTHORS, BOOKS, madeUpCatalogue } from '../fixtures/server/bookshop.js';
import { FIXTURE_SERVER_MAIN, tsStdioTarget } from './helpers/servers.js';

// The made-up catalogues the tiny model's warm-up practises on (scripts/tiny-model/build.ts --warmup-catalogues):
// the same shape as the bookshop's own, sharing none of its ids, titles or author names.
describe('madeUpCatalogue', () => {
  const catalogues = [1, 2, 3, 4, 5].map(madeUpCatalogue);

  it('shares no id, title or author name with the bookshop, and has its shape', () => {
    const real = new Set([...BOOKS.flatMap((b) => [b.id, b.title]), ...AUTHORS.flatMap((a) => [a.id, a.name])]);
    for (const c of catalogues) {
      expect(c.books).toHaveLength(BOOKS.length);
      expect(c.authors).toHaveLength(AUTHORS.length);
      for (const v of [...c.books.flatMap((b) => [b.id, b.title]), ...c.authors.flatMap((a) => [a.id, a.name])]) expect(real.has(v), v).toBe(false);
      expect(new Set(c.books.map((b) => b.title)).size).toBe(c.books.length);
      for (const a of c.authors) expect(c.books.filter((b) => b.author_id === a.id).length).toBeGreaterThanOrEqual(3);
      for (const b of c.books) expect(b.id).toMatch(/^bk-\d{3}$/);
      for (const a of c.authors) expect(a.id).toMatch(/^au-\d{2}$/);
    }
    expect(catalogues[0].books.map((b) => b.id)).not.toEqual(catalogues[1].books.map((b) => b.id));
    expect(madeUpCatalogue(1)).toEqual(catalogues[0]);
  });

  it('is what the fixture server serves with --catalogue N', async () => {
    const c = catalogues[1];
    const session = await connect(tsStdioTarget(FIXTURE_SERVER_MAIN, ['--catalogue', '2']));
    try {
      const book = await session.callTool('get_book', { book_id: c.books[0].id });
      expect(book.structuredContent).toMatchObject({ id: c.books[0].id, title: c.books[0].title });
      const own = await session.callTool('get_book', { book_id: BOOKS[0].id });
      expect(own.isError).toBe(true);
      expect(own.text).toContain(`Book ids run from ${c.books[0].id} to ${c.books.at(-1)!.id}`);
      const author = await session.callTool('get_author', { author_id: 'au-01' });
      expect(author.text).toContain(`Author ids run from ${c.authors[0].id} to ${c.authors.at(-1)!.id}`);
    } finally {
      await session.close();
    }
  });
});
