import { describe, expect, it } from 'vitest';
import { makeRng } from '../random-model.js';
import { toolDrill } from './tool-drills.js';

describe('toolDrill', () => {
  const drills = Array.from({ length: 400 }, (_, i) => toolDrill(makeRng(i + 1)));

  it('copies every value it writes from the task or from an earlier tool result (a skill, never a memorised fact)', () => {
    for (const d of drills) {
      let seen = d.messages[1].content!;
      for (const m of d.messages.slice(2)) {
        if (m.role === 'tool') seen += `\n${m.content}`;
        for (const c of m.tool_calls ?? []) {
          const args = JSON.parse(c.function.arguments) as Record<string, unknown>;
          for (const v of Object.values(args)) for (const part of String(v).split(', ')) expect(seen, `${c.function.name} ${part}`).toContain(part);
        }
      }
    }
  });

  it('calls only its own made-up tools, never the bookshop’s, and ends with complete_task', () => {
    const names = new Set(drills.flatMap((d) => d.messages.flatMap((m) => (m.tool_calls ?? []).map((c) => c.function.name))));
    for (const d of drills) expect(d.messages.at(-2)!.tool_calls![0].function.name).toBe('complete_task');
    for (const d of drills) for (const m of d.messages) for (const c of m.tool_calls ?? []) expect(d.tools.map((t) => t.function.name)).toContain(c.function.name);
    for (const bookshop of ['get_book', 'search_books', 'convert_price', 'get_author', 'list_authors', 'check_stock']) expect(names.has(bookshop)).toBe(false);
    expect(names.size).toBeGreaterThanOrEqual(9);
  });

  it('draws every kind of drill: a lookup by id, search then lookup, a listing, a computation, a lookup feeding a computation, a filtered listing', () => {
    const shapes = new Set(drills.map((d) => d.messages.filter((m) => m.role === 'assistant').map((m) => m.tool_calls![0].function.name.split('_')[0]).join('+')));
    expect([...shapes].sort()).toEqual(['convert+complete', 'get+complete', 'get+convert+complete', 'list+complete', 'search+complete', 'search+get+complete']);
  });
});
