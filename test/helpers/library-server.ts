/**
 * A stdio MCP server for a small lending library: seven read-only tools over a fixed catalogue of books, members
 * and branches, with several tools about the same entities (a book has a record, an availability and a holds
 * list), which is what makes scenarios about one entity likely. Issue 42 §6 generates scenario sets from it.
 *
 *   --drop-tools-after N   after N tool calls, the list holds only `list_branches` and the server says so with
 *                          notifications/tools/list_changed (a target whose tools change mid-run; §5)
 *   --unannounced          the server does not declare tools.listChanged, so clients do not follow its notices: a
 *                          dropped tool is found out only by calling it (the SDK answers "Tool … disabled")
 */
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const BRANCHES = [
  { id: 'br-1', name: 'Central', city: 'Leeds' },
  { id: 'br-2', name: 'Riverside', city: 'York' },
  { id: 'br-3', name: 'Hillside', city: 'Bath' },
];
const TITLES = ['The Quiet Harbour', 'Salt and Iron', 'A Map of Winter', 'The Glass Orchard', 'Northern Lights', 'The Last Ferry', 'Seven Bridges', 'Paper Moons', 'The Clockmaker', 'Wild Thyme'];
const AUTHORS = ['Nora Quill', 'Idris Bell', 'Maya Stone', 'Oskar Lind', 'Rosa Vega'];
const BOOKS = TITLES.map((title, i) => ({
  id: `lb-${String(i + 1).padStart(3, '0')}`,
  title,
  author: AUTHORS[i % AUTHORS.length],
  year: 1990 + ((i * 7) % 30),
  branch_id: BRANCHES[i % BRANCHES.length].id,
  copies: 1 + (i % 3),
  holds: i % 4,
}));
const MEMBERS = ['Alice Grant', 'Ben Ortiz', 'Chloe Park', 'Dev Mehta', 'Ewa Nowak', 'Finn Walsh'].map((name, i) => ({
  id: `m-${100 + i}`,
  name,
  branch_id: BRANCHES[i % BRANCHES.length].id,
  loans: BOOKS.filter((_, j) => j % 6 === i).map((b) => b.id),
}));

const READ_ONLY = { readOnlyHint: true, openWorldHint: false };
const json = (v: unknown): CallToolResult => ({ content: [{ type: 'text', text: JSON.stringify(v, null, 2) }] });
const missing = (what: string, id: string): CallToolResult => ({ content: [{ type: 'text', text: `No ${what} with id ${id}.` }], isError: true });
const bookId = z.string().regex(/^lb-\d{3}$/).describe('Book id, e.g. "lb-001".');
const memberId = z.string().regex(/^m-\d{3}$/).describe('Member id, e.g. "m-100".');

const dropAfter = process.argv.includes('--drop-tools-after') ? Number(process.argv[process.argv.indexOf('--drop-tools-after') + 1]) : Infinity;
let calls = 0;

/** Counts a tool's calls; the call that reaches --drop-tools-after takes every tool but list_branches off the list. */
function counted<A extends unknown[]>(run: (...a: A) => Promise<CallToolResult>): (...a: A) => Promise<CallToolResult> {
  return async (...a) => {
    const result = await run(...a);
    // disable() sends notifications/tools/list_changed for each tool it takes off the list.
    if (++calls === dropAfter) for (const t of registered.slice(0, -1)) t.disable();
    return result;
  };
}

const server = new McpServer({ name: 'library', version: '1.0.0' });
const registered = [
  server.registerTool('search_books', {
    description: 'Books whose title or author contains every word of the query (case-insensitive).',
    inputSchema: { query: z.string().describe('Words to look for; "" matches every book.') },
    annotations: READ_ONLY,
  }, counted(async ({ query }) => {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    return json({ results: BOOKS.filter((b) => words.every((w) => `${b.title} ${b.author}`.toLowerCase().includes(w))).map((b) => ({ id: b.id, title: b.title, author: b.author })) });
  })),
  server.registerTool('get_book', {
    description: "One book's title, author, year and home branch.",
    inputSchema: { book_id: bookId },
    annotations: READ_ONLY,
  }, counted(async ({ book_id }) => {
    const b = BOOKS.find((x) => x.id === book_id);
    return b ? json({ id: b.id, title: b.title, author: b.author, year: b.year, branch_id: b.branch_id }) : missing('book', book_id);
  })),
  server.registerTool('check_availability', {
    description: 'How many copies of a book the library has and how many are on hold.',
    inputSchema: { book_id: bookId },
    annotations: READ_ONLY,
  }, counted(async ({ book_id }) => {
    const b = BOOKS.find((x) => x.id === book_id);
    return b ? json({ book_id: b.id, copies: b.copies, holds: b.holds }) : missing('book', book_id);
  })),
  server.registerTool('list_members', {
    description: 'All members, optionally only those of one branch.',
    inputSchema: { branch_id: z.enum(['br-1', 'br-2', 'br-3']).optional().describe('Only members of this branch.') },
    annotations: READ_ONLY,
  }, counted(async ({ branch_id }) => json({ members: MEMBERS.filter((m) => !branch_id || m.branch_id === branch_id).map((m) => ({ id: m.id, name: m.name })) }))),
  server.registerTool('get_member', {
    description: "One member's name and home branch.",
    inputSchema: { member_id: memberId },
    annotations: READ_ONLY,
  }, counted(async ({ member_id }) => {
    const m = MEMBERS.find((x) => x.id === member_id);
    return m ? json({ id: m.id, name: m.name, branch_id: m.branch_id }) : missing('member', member_id);
  })),
  server.registerTool('get_loans', {
    description: 'The ids of the books a member has on loan.',
    inputSchema: { member_id: memberId },
    annotations: READ_ONLY,
  }, counted(async ({ member_id }) => {
    const m = MEMBERS.find((x) => x.id === member_id);
    return m ? json({ member_id: m.id, book_ids: m.loans }) : missing('member', member_id);
  })),
  server.registerTool('list_branches', {
    description: "The library's branches: id, name and city.",
    inputSchema: {},
    annotations: READ_ONLY,
  }, counted(async () => json({ branches: BRANCHES }))),
];

// McpServer declares tools.listChanged itself when the first tool is registered; --unannounced takes it back.
if (process.argv.includes('--unannounced')) server.server.registerCapabilities({ tools: { listChanged: false } });
await server.connect(new StdioServerTransport());
process.stdin.on('end', () => process.exit(0));
