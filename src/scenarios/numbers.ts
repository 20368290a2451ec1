/**
 * Numbers in answers and tool results, read as numbers: a check that expects 33 passes on "33", "33.0" or "+33 °C",
 * and fails on "2033", "33.5", "-33" or "bk-033" (a substring test passed all of those).
 */

/**
 * A number token in normalised text (see normalizeAnswerText: lower case, thousands separators already removed):
 * an optional sign, digits, an optional decimal part and exponent. It starts at no letter, digit or decimal point
 * (so "2033" holds no 33 and "v2" no 2), and a hyphen after a letter is no sign ("bk-033" holds no number); it ends
 * at no digit (letters may follow: "33km", "5th").
 */
const NUMBER_TOKEN = /(?<![\p{L}\p{N}_.]|\p{L}[-+])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+(?!\p{L}))?(?![\p{N}_]|\.\d)/gu;

/** A value that is one number and nothing else ("33", "-4.5", "1e-7"), after normalisation. */
const WHOLE_NUMBER = /^[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?$/;

/** The numbers in normalised text, in order. */
export function numbersIn(normalized: string): number[] {
  return [...normalized.replace(/\u2212/g, '-').matchAll(NUMBER_TOKEN)].map((m) => Number(m[0])).filter(Number.isFinite);
}

/** The number a normalised value is, when it is one number and nothing else; else undefined. */
export function numberValue(normalized: string): number | undefined {
  const v = normalized.replace(/\u2212/g, '-');
  if (!WHOLE_NUMBER.test(v)) return undefined;
  const n = Number(v);
  return Number.isFinite(n) ? n : undefined;
}

/** Relative tolerance for a value written with a decimal part or an exponent (floating-point noise, not rounding). */
export const RELATIVE_TOLERANCE = 1e-6;

/**
 * The tolerance a normalised number value implies: exact for an integer as written ("33"), 1e-6 relative for one
 * written with a decimal part or an exponent ("33.47" also matches 33.4700001); `tolerance`, when given, instead.
 */
export function impliedTolerance(normalized: string, n: number, tolerance?: number): number {
  if (tolerance !== undefined) return tolerance;
  return /[.e]/.test(normalized) ? RELATIVE_TOLERANCE * Math.abs(n) : 0;
}

/** Whether normalised text holds the number `n` (within `tol`, give or take binary rounding) as a number token. */
export function holdsNumber(normalized: string, n: number, tol: number): boolean {
  return numbersIn(normalized).some((x) => Math.abs(x - n) <= tol + 4 * Number.EPSILON * Math.max(Math.abs(x), Math.abs(n)));
}

/**
 * Whether normalised text holds the normalised value `v` as text, with its digits not part of a longer number:
 * "33 °c" is in "it is 33 °c" but not in "2033 °c" or "1.33 °c".
 */
export function holdsText(normalized: string, v: string): boolean {
  const digitBefore = /\d$|\d[.,]$/;
  const digitAfter = /^\d|^[.,]\d/;
  for (let i = normalized.indexOf(v); i >= 0; i = normalized.indexOf(v, i + 1)) {
    if (/^\d/.test(v) && digitBefore.test(normalized.slice(Math.max(0, i - 2), i))) continue;
    if (/\d$/.test(v) && digitAfter.test(normalized.slice(i + v.length, i + v.length + 2))) continue;
    return true;
  }
  return false;
}
