/**
 * Copy drills: short synthetic chats that exercise the two generic skills every pretrained LLM brings and a
 * model trained from scratch on a few hundred transcripts lacks — repeating values it was given (ids, numbers,
 * names) and reading one field out of a JSON object. Mixed into the tiny model's warm-up, they make it copy
 * values into tool arguments and answers instead of memorising the values of its transcripts. They mention no
 * tool and solve no scenario: the bookshop's task skills come only from the expert's transcripts.
 */
import type { ChatMessage } from '../../src/agent/policy.js';
import { AUTHORS, BOOKS, CURRENCIES, GENRES } from '../../fixtures/server/bookshop.js';
import type { makeRng } from '../random-model.js';

type Rng = ReturnType<typeof makeRng>;

/** The words of the bookshop's titles and author names, and its countries: the drills' vocabulary (tool-drills.ts too). */
export const WORDS = [...new Set(BOOKS.flatMap((b) => b.title.split(' ')).concat(AUTHORS.flatMap((a) => a.name.split(' '))))];
export const COUNTRIES = [...new Set(AUTHORS.map((a) => a.country))];
const KEYS = ['id', 'title', 'author', 'author_id', 'genre', 'year', 'price_usd', 'stock', 'name', 'country', 'rate', 'converted', 'amount_usd', 'currency', 'total'];

export function pick<T>(rng: Rng, xs: readonly T[]): T {
  return xs[Math.floor(rng.uniform() * xs.length)];
}

export function int(rng: Rng, lo: number, hi: number): number {
  return lo + Math.floor(rng.uniform() * (hi - lo + 1));
}

/** A random value of the kinds the bookshop's tasks and outputs contain. */
function value(rng: Rng): string {
  switch (int(rng, 0, 7)) {
    case 0: return `bk-${String(int(rng, 0, 999)).padStart(3, '0')}`;
    case 1: return `au-${String(int(rng, 0, 99)).padStart(2, '0')}`;
    case 2: return String(int(rng, 1, 999));
    case 3: return `${int(rng, 0, 999)}.${String(int(rng, 0, 99)).padStart(2, '0')}`;
    case 4: return `${pick(rng, WORDS)} ${pick(rng, WORDS)}`;
    case 5: return pick(rng, WORDS);
    case 6: return pick(rng, [...COUNTRIES, ...GENRES, ...CURRENCIES]);
    default: return String(int(rng, 1900, 2030));
  }
}

/** One drill conversation (user asks, assistant answers); alternate repeat drills and JSON-field drills. */
export function copyDrill(rng: Rng): ChatMessage[] {
  if (rng.uniform() < 0.5) {
    const items = Array.from({ length: int(rng, 1, 4) }, () => value(rng));
    const ask = pick(rng, ['Repeat exactly', 'Copy these values', 'Say back', 'Echo']);
    return [
      { role: 'user', content: `${ask}: ${items.map((v) => `"${v}"`).join(', ')}` },
      { role: 'assistant', content: items.join(', ') },
    ];
  }
  const keys = [...KEYS].sort(() => rng.uniform() - 0.5).slice(0, int(rng, 2, 6));
  const obj: Record<string, string | number> = {};
  for (const k of keys) {
    const v = value(rng);
    obj[k] = /^\d+(\.\d+)?$/.test(v) ? Number(v) : v;
  }
  const key = pick(rng, keys);
  return [
    { role: 'user', content: `${JSON.stringify(obj, null, 2)}\nWhat is the ${key.replace(/_/g, ' ')}?` },
    { role: 'assistant', content: String(obj[key]) },
  ];
}
