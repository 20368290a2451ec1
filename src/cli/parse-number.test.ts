import { InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import { describeBounds, formatNumber, parseNumber } from './parse-number.js';

describe('parseNumber', () => {
  it('reads decimal notation, exponents included', () => {
    expect(parseNumber('5e-4', { above: 0 })).toBe(5e-4);
    expect(parseNumber('24', { integer: true, above: 0 })).toBe(24);
    expect(parseNumber('-3', { integer: true })).toBe(-3);
    expect(parseNumber('.5')).toBe(0.5);
  });

  it('refuses what Number() would silently accept', () => {
    for (const text of ['', ' ', '0x10', 'Infinity', '1e999', 'eighty', '1,5']) {
      expect(() => parseNumber(text), JSON.stringify(text)).toThrow(InvalidArgumentError);
    }
  });

  it('enforces integer and bounds, naming what was expected', () => {
    expect(() => parseNumber('2.5', { integer: true, above: 0 })).toThrow('expected a positive integer, got "2.5"');
    expect(() => parseNumber('0', { integer: true, above: 0, unit: 'milliseconds' })).toThrow('expected a positive integer (milliseconds), got "0"');
    expect(() => parseNumber('1', { integer: true, min: 2 })).toThrow('expected an integer >= 2');
    expect(() => parseNumber('70000', { integer: true, min: 0, max: 65535 })).toThrow('expected an integer from 0 to 65535');
    expect(() => parseNumber('-0.1', { min: 0 })).toThrow('expected a number >= 0');
    expect(parseNumber('65535', { integer: true, min: 0, max: 65535 })).toBe(65535);
  });

  it('takes ratios only where asked', () => {
    expect(parseNumber('1/4', { min: 0, below: 1, ratios: true })).toBe(0.25);
    expect(() => parseNumber('1/4', { min: 0, below: 1 })).toThrow(InvalidArgumentError);
    expect(() => parseNumber('4/4', { min: 0, below: 1, ratios: true })).toThrow('expected a number >= 0 and < 1 (or a ratio such as 1/3)');
  });

  it('describes bounds in words', () => {
    expect(describeBounds({})).toBe('a number');
    expect(describeBounds({ above: 0 })).toBe('a positive number');
    expect(describeBounds({ integer: true, min: 0 })).toBe('an integer >= 0');
    expect(describeBounds({ min: 0, max: 1 })).toBe('a number from 0 to 1');
  });
});

describe('formatNumber', () => {
  it('shows a fraction of small whole numbers as a ratio and every other number as JavaScript prints it', () => {
    expect(formatNumber(1 / 3)).toBe('1/3');
    expect(formatNumber(2 / 7)).toBe('2/7');
    expect(formatNumber(0.25)).toBe('0.25');
    expect(formatNumber(24)).toBe('24');
    expect(formatNumber(5e-4)).toBe('0.0005');
    expect(formatNumber(Math.PI)).toBe(String(Math.PI));
    expect(parseNumber(formatNumber(1 / 3), { ratios: true })).toBe(1 / 3);
  });
});
