/**
 * The one parser of numeric command-line values. Every command's numeric option goes through it, so `--lr 5e-4`,
 * `--count 24` and `--port 0` are read, bounded and refused the same way, with a message that says what was expected.
 */
import { InvalidArgumentError } from 'commander';
import { DECIMAL } from '../util/decimal.js';

export interface NumberBounds {
  /** Whole numbers only. */
  integer?: boolean;
  /** Smallest value allowed (inclusive). */
  min?: number;
  /** Values must be greater than this (exclusive). */
  above?: number;
  /** Largest value allowed (inclusive). */
  max?: number;
  /** Values must be less than this (exclusive). */
  below?: number;
  /** What the number counts, named in the error message (e.g. "milliseconds"). */
  unit?: string;
  /** Also accept a ratio `a/b` (e.g. 1/3). */
  ratios?: boolean;
}

/** What a value within `b` is, in words: "a positive integer", "a number from 0 to 1", "an integer >= 2". */
export function describeBounds(b: NumberBounds): string {
  const noun = b.integer ? 'integer' : 'number';
  const an = b.integer ? 'an' : 'a';
  const low = b.above !== undefined ? `> ${b.above}` : b.min !== undefined ? `>= ${b.min}` : undefined;
  const high = b.below !== undefined ? `< ${b.below}` : b.max !== undefined ? `<= ${b.max}` : undefined;
  let text: string;
  if (b.above === 0 && !high) text = `a positive ${noun}`;
  else if (b.min !== undefined && b.max !== undefined && b.above === undefined && b.below === undefined) text = `${an} ${noun} from ${b.min} to ${b.max}`;
  else text = [`${an} ${noun}`, [low, high].filter(Boolean).join(' and ')].filter(Boolean).join(' ');
  return b.unit ? `${text} (${b.unit})` : text;
}

/** Reads `text` as a number within `b`; throws commander's InvalidArgumentError (a one-line usage error) otherwise. */
export function parseNumber(text: string, b: NumberBounds = {}): number {
  const t = text.trim();
  let n = NaN;
  const ratio = b.ratios ? /^(.+)\/(.+)$/.exec(t) : null;
  if (ratio && DECIMAL.test(ratio[1].trim()) && DECIMAL.test(ratio[2].trim())) n = Number(ratio[1]) / Number(ratio[2]);
  else if (DECIMAL.test(t)) n = Number(t);
  const ok =
    Number.isFinite(n) &&
    (!b.integer || Number.isInteger(n)) &&
    (b.min === undefined || n >= b.min) &&
    (b.above === undefined || n > b.above) &&
    (b.max === undefined || n <= b.max) &&
    (b.below === undefined || n < b.below);
  if (!ok) throw new InvalidArgumentError(`expected ${describeBounds(b)}${b.ratios ? ' (or a ratio such as 1/3)' : ''}, got ${JSON.stringify(text)}`);
  return n;
}

/** A commander argument parser for numbers within `b`. */
export function numberParser(b: NumberBounds = {}): (text: string) => number {
  return (text: string) => parseNumber(text, b);
}

/**
 * A number as a person reads it in help text: a ratio of small whole numbers when it is one (1/3 rather than
 * 0.3333333333333333), otherwise as JavaScript prints it.
 */
export function formatNumber(n: number): string {
  if (Number.isInteger(n) || !Number.isFinite(n)) return String(n);
  for (let d = 2; d <= 12; d++) {
    const k = Math.round(n * d);
    if (Math.abs(k / d - n) < 1e-12) return String(n).length > 6 ? `${k}/${d}` : String(n);
  }
  return String(n);
}
