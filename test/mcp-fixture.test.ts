/** The bookshop fixture server, over stdio and streamable HTTP, through mcprl's client. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, SafetyPolicy, type McpSession, type Target } from '../src/mcp/index.js';
import { AUTHORS, BOOKS, RATES } from '../fixtures/server/bookshop.js';
import { fixtureStdioTarget, isAlive, startFixtureHttp, type RunningHttpServer } from './helpers/servers.js';

const EXPECTED_TOOLS = {
  search_books: { readOnlyHint: true, destructiveHint: false },
  get_book: { readOnlyHint: true, destructiveHint: false },
  list_authors: { readOnlyHint: true, destructiveHint: false },
  get_author: { readOnlyHint: true, destructiveHint: false },
  check_stock: { readOnlyHint: true, destructiveHint: false },
  convert_price: { readOnlyHint: true, destructiveHint: false },
  place_order: { readOnlyHint: false, destructiveHint: false },
  restock: { readOnlyHint: false, destructiveHint: false },
  cancel_order: { readOnlyHint: false, destructiveHint: true },
};

const parse = (text: string) => JSON.parse(text);

describe('fixture data', () => {
  it('is deterministic and well formed: 40 books, 12 authors, every genre and author used', () => {
    expect(BOOKS).toHaveLength(40);
    expect(AUTHORS).toHaveLength(12);
    expect(BOOKS.map((b) => b.id)).toEqual(Array.from({ length: 40 }, (_, i) => `bk-${String(i + 1).padStart(3, '0')}`));
    expect(new Set(BOOKS.map((b) => b.title)).size).toBe(40);
    expect(new Set(BOOKS.map((b) => b.genre))).toEqual(new Set(['fiction', 'mystery', 'science', 'history', 'children', 'poetry']));
    expect(new Set(BOOKS.map((b) => b.author_id)).size).toBe(12);
    // Pinned values: if the generator changes, scenarios written against the old data break, so this must fail.
    expect(BOOKS[1]).toEqual({ id: 'bk-002', title: 'The Winter Comet', author_id: 'au-02', genre: 'fiction', year: 1968, price_usd: 12.99, stock: 10 });
  });
});

function behaves(name: string, makeTarget: () => Promise<Target>) {
  describe(`bookshop over ${name}`, () => {
    let session: McpSession;
    beforeAll(async () => {
      // This test is the only client of its server, so it opts out of the isolation rule for writes.
      session = await connect(await makeTarget(), { policy: new SafetyPolicy({ allowUnisolatedWrites: true }) });
    });
    afterAll(async () => {
      await session?.close();
    });

    it('identifies itself and lists every tool with the declared annotations, resources, templates and prompts', async () => {
      expect(session.server).toMatchObject({ name: 'mcprl-bookshop', version: '1.0.0' });
      expect(session.server.protocolVersion).toMatch(/^\d{4}-\d{2}-\d{2}$/);
      const tools = await session.listTools();
      expect(tools.map((t) => t.name)).toEqual(Object.keys(EXPECTED_TOOLS));
      for (const t of tools) {
        expect(t.annotations).toMatchObject(EXPECTED_TOOLS[t.name as keyof typeof EXPECTED_TOOLS]);
        expect(t.description.length).toBeGreaterThan(10);
      }
      const getBook = tools.find((t) => t.name === 'get_book')!;
      expect(getBook.outputSchema).toMatchObject({ type: 'object' });
      const search = tools.find((t) => t.name === 'search_books')!;
      expect(search.inputSchema).toMatchObject({
        properties: { genre: { enum: ['fiction', 'mystery', 'science', 'history', 'children', 'poetry'] }, max_results: { default: 5 } },
        required: ['query'],
      });
      expect((await session.listResources()).map((r) => r.uri)).toEqual(['bookshop://catalog', 'bookshop://authors']);
      expect((await session.listResourceTemplates()).map((r) => r.uriTemplate)).toEqual(['bookshop://books/{book_id}']);
      expect((await session.listPrompts()).map((p) => p.name)).toEqual(['recommend_books']);
    });

    it('answers read-only tools from the seeded data', async () => {
      const book = await session.callTool('get_book', { book_id: 'bk-002' });
      expect(book.isError).toBe(false);
      expect(book.structuredContent).toEqual({ ...BOOKS[1], author: 'Kenji Watanabe' });

      const search = parse((await session.callTool('search_books', { query: 'winter', max_results: 20 })).text);
      const expected = BOOKS.filter((b) => b.title.toLowerCase().includes('winter')).map((b) => b.id);
      expect(search.results.map((r: { id: string }) => r.id)).toEqual(expected);

      const byGenre = parse((await session.callTool('search_books', { query: '', genre: 'poetry' })).text);
      expect(byGenre.total_matches).toBe(BOOKS.filter((b) => b.genre === 'poetry').length);
      expect(byGenre.results.length).toBe(Math.min(5, byGenre.total_matches));

      const uk = parse((await session.callTool('list_authors', { country: 'united kingdom' })).text);
      expect(uk.authors.map((a: { id: string }) => a.id)).toEqual(['au-01', 'au-10']);

      const author = parse((await session.callTool('get_author', { author_id: 'au-04' })).text);
      expect(author.book_ids).toEqual(BOOKS.filter((b) => b.author_id === 'au-04').map((b) => b.id));

      const eur = parse((await session.callTool('convert_price', { amount: 12.99, currency: 'EUR' })).text);
      expect(eur.converted).toBe(Math.round(12.99 * RATES.EUR * 100) / 100);
      const jpy = parse((await session.callTool('convert_price', { amount: 10, currency: 'JPY' })).text);
      expect(jpy.converted).toBe(1515);
    });

    it('answers bad input with isError results that explain themselves', async () => {
      const unknown = await session.callTool('get_book', { book_id: 'bk-999' });
      expect(unknown).toMatchObject({ isError: true });
      expect(unknown.text).toContain('bk-999');
      expect(unknown.text).toContain('search_books');
      const negative = await session.callTool('convert_price', { amount: -5, currency: 'USD' });
      expect(negative.isError).toBe(true);
      const tooBig = await session.callTool('convert_price', { amount: 5e9, currency: 'USD' });
      expect(tooBig.isError).toBe(true);
      const badId = await session.callTool('get_book', { book_id: 'seven' });
      expect(badId.isError).toBe(true);
    });

    it('places orders and restocks (additive writes), refuses cancel_order without allowDestructive', async () => {
      const before = parse((await session.callTool('check_stock', { book_id: 'bk-004' })).text).stock;
      expect(before).toBe(BOOKS[3].stock);
      const order = await session.callTool('place_order', {
        customer: { name: 'Ada', email: 'ada@example.com' },
        items: [{ book_id: 'bk-004', quantity: 2 }],
      });
      expect(order.isError).toBe(false);
      const placed = parse(order.text);
      expect(placed.order_id).toMatch(/^ord-\d{4}$/);
      expect(placed.total_usd).toBeCloseTo(2 * BOOKS[3].price_usd, 2);
      expect(parse((await session.callTool('check_stock', { book_id: 'bk-004' })).text).stock).toBe(before - 2);

      const tooMany = await session.callTool('place_order', {
        customer: { name: 'Ada', email: 'ada@example.com' },
        items: [{ book_id: 'bk-004', quantity: 99 }],
      });
      expect(tooMany.isError).toBe(true);
      expect(parse((await session.callTool('check_stock', { book_id: 'bk-004' })).text).stock).toBe(before - 2);

      const restocked = parse((await session.callTool('restock', { book_id: 'bk-004', quantity: 5 })).text);
      expect(restocked.stock).toBe(before + 3);

      const refused = await session.callTool('cancel_order', { order_id: placed.order_id });
      expect(refused.isError).toBe(true);
      expect(refused.text).toContain("refused tool 'cancel_order'");
      expect(refused.refused?.remedy).toContain('--allow-destructive');
      expect(parse((await session.callTool('check_stock', { book_id: 'bk-004' })).text).stock).toBe(before + 3);
    });
  });
}

behaves('stdio', async () => fixtureStdioTarget());

let http: RunningHttpServer | undefined;
afterAll(async () => {
  await http?.stop();
});
behaves('streamable HTTP', async () => {
  http = await startFixtureHttp();
  return { kind: 'http', url: http.url };
});

describe('bookshop state and lifecycle', () => {
  it('cancel_order runs with allowDestructive and puts the books back; a fresh process starts from the seed', async () => {
    const s = await connect(fixtureStdioTarget(), { policy: new SafetyPolicy({ allowDestructive: true }), isolated: true, stateInMemory: true });
    const pid = s.pid!;
    try {
      const order = JSON.parse(
        (await s.callTool('place_order', { customer: { name: 'B', email: 'b@example.com' }, items: [{ book_id: 'bk-002', quantity: 3 }] })).text,
      );
      expect(JSON.parse((await s.callTool('check_stock', { book_id: 'bk-002' })).text).stock).toBe(BOOKS[1].stock - 3);
      const cancelled = await s.callTool('cancel_order', { order_id: order.order_id });
      expect(cancelled.isError).toBe(false);
      expect(JSON.parse((await s.callTool('check_stock', { book_id: 'bk-002' })).text).stock).toBe(BOOKS[1].stock);
      const twice = await s.callTool('cancel_order', { order_id: order.order_id });
      expect(twice.isError).toBe(true);
      await s.callTool('restock', { book_id: 'bk-002', quantity: 7 });
    } finally {
      await s.close();
    }
    expect(isAlive(pid)).toBe(false);
    const fresh = await connect(fixtureStdioTarget());
    try {
      expect(JSON.parse((await fresh.callTool('check_stock', { book_id: 'bk-002' })).text).stock).toBe(BOOKS[1].stock);
    } finally {
      await fresh.close();
    }
  });

  it('HTTP sessions of one server process share its state', async () => {
    const server = await startFixtureHttp();
    try {
      const a = await connect({ kind: 'http', url: server.url }, { policy: new SafetyPolicy({ allowUnisolatedWrites: true }) });
      const b = await connect({ kind: 'http', url: server.url });
      await a.callTool('restock', { book_id: 'bk-010', quantity: 4 });
      expect(JSON.parse((await b.callTool('check_stock', { book_id: 'bk-010' })).text).stock).toBe(BOOKS[9].stock + 4);
      await a.close();
      await b.close();
    } finally {
      await server.stop();
    }
  });
});
