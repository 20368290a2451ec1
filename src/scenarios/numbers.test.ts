import { describe, expect, it } from 'vitest';
import { answerContains } from './scenario.js';
import { numbersIn } from './numbers.js';

describe('numbers in answers', () => {
  it('reads numbers as tokens: sign, decimals, thousands separators, exponents; no digits of ids or longer numbers', () => {
    expect(numbersIn('it is 33 °c in 2033, -4.5 at night, 1234567 people, 1e-7 m, v2 and bk-033; 3-5 days')).toEqual([33, 2033, -4.5, 1234567, 1e-7, 3, 5]);
  });

  it('a number value matches as a number, never as a substring', () => {
    expect(answerContains('The temperature is 33 °C.', '33')).toBe(true);
    expect(answerContains('It was built in 2033.', '33')).toBe(false);
    expect(answerContains('About 33.5 degrees', '33')).toBe(false);
    expect(answerContains('Minus 33: -33', '-33')).toBe(true);
    expect(answerContains('-33 degrees', '33')).toBe(false);
    expect(answerContains('book bk-033', '33')).toBe(false);
    expect(answerContains('It is 33.0 °C', '33')).toBe(true);
    expect(answerContains('It costs 1,234.50 EUR', '1234.5')).toBe(true);
    expect(answerContains('It costs 12.87 EUR', '12.870')).toBe(true);
    expect(answerContains('It costs 12.8700000001 EUR', '12.87')).toBe(true);
    expect(answerContains('It costs 12.88 EUR', '12.87')).toBe(false);
    expect(answerContains('It costs 12.9 EUR', '12.87', 0.05)).toBe(true);
  });

  it('a text value with digits does not match inside a longer number', () => {
    expect(answerContains('It is 33 °C', '33 °C')).toBe(true);
    expect(answerContains('It is 2033 °C', '33 °C')).toBe(false);
    expect(answerContains('It is 1.33 °C', '33 °C')).toBe(false);
    expect(answerContains('The book is bk-021.', 'bk-021')).toBe(true);
    expect(answerContains('The book is bk-0213.', 'bk-021')).toBe(false);
    expect(answerContains('Dune by Frank Herbert', 'dune')).toBe(true);
  });
});
