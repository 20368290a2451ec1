import { describe, expect, it } from 'vitest';
import { label, plainArgs } from './offline/index.js';

describe('natural wording of offline tasks', () => {
  it('says field names as words, with units spelled out', () => {
    expect(label('price_usd')).toBe('price in USD');
    expect(label('heightCm')).toBe('height in cm');
    expect(label('entityType')).toBe('entity type');
    expect(label('usd')).toBe('usd');
  });

  it('describes write arguments without JSON or field names: one phrase per record, lists joined with "and"', () => {
    expect(plainArgs({ entities: [{ name: 'Grace Hopper', entityType: 'person', observations: ['wrote a compiler', 'admiral'] }] })).toBe(
      'an entity with name "Grace Hopper", entity type "person" and observations "wrote a compiler" and "admiral"',
    );
    expect(plainArgs({ observations: [{ entityName: 'Ada', contents: ['x1'] }, { entityName: 'Bob', contents: ['y2'] }] })).toBe(
      'an observation with entity name "Ada" and contents "x1" and an observation with entity name "Bob" and contents "y2"',
    );
    expect(plainArgs({ path: '/a/b.txt', quantity: 3 })).toBe('path "/a/b.txt" and quantity 3');
  });
});
