import { describe, expect, it } from 'vitest';
import { ArgsValidator } from './validate-args.js';

const getBook = { name: 'get_book', inputSchema: { type: 'object', properties: { book_id: { type: 'string', pattern: '^bk-\\d+$' } }, required: ['book_id'] } };
const order = { name: 'place_order', inputSchema: { type: 'object', properties: { quantity: { type: 'integer', minimum: 1 } }, required: ['quantity'] } };

describe('ArgsValidator.for', () => {
  it('shares one validator between rollouts that offer the same tools (equal schemas, other objects)', () => {
    const a = ArgsValidator.for([getBook, order]);
    const b = ArgsValidator.for(JSON.parse(JSON.stringify([getBook, order])));
    expect(b).toBe(a);
  });

  it('keeps tool lists that differ in a name, a schema or the order apart', () => {
    const a = ArgsValidator.for([getBook, order]);
    expect(ArgsValidator.for([order, getBook])).not.toBe(a);
    expect(ArgsValidator.for([getBook])).not.toBe(a);
    const looser = { ...order, inputSchema: { ...order.inputSchema, properties: { quantity: { type: 'integer' } } } };
    const other = ArgsValidator.for([getBook, looser]);
    expect(other).not.toBe(a);
    // Each answers by its own schemas.
    expect(other.check('place_order', { quantity: 0 })).toEqual({ ok: true });
    expect(a.check('place_order', { quantity: 0 })).toEqual({ ok: false, error: '/quantity must be >= 1' });
  });

  it('answers a shared validator the same as a fresh one, call after call', () => {
    const shared = ArgsValidator.for([getBook, order]);
    const fresh = new ArgsValidator([getBook, order]);
    const calls: [string, unknown][] = [['get_book', { book_id: 'x' }], ['get_book', {}], ['get_book', { book_id: 'bk-1' }], ['place_order', { quantity: 'two' }]];
    for (const [name, args] of calls) expect(shared.check(name, args)).toEqual(fresh.check(name, args));
    expect(shared.check('get_book', {})).toEqual({ ok: false, error: "arguments must have required property 'book_id'" });
  });
});
