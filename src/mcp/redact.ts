/**
 * Keeping a target's secrets out of messages. The values of its headers and environment are used to reach it,
 * and nothing else: error text that quotes what the target said (its stderr, an HTTP error body) is passed
 * through `redact` with them before anyone sees it.
 */
import type { Target } from './types.js';

export const REDACTED = '[redacted]';

/**
 * Values shorter than this are left alone: they are not secrets worth the name (a flag like DEBUG=1), and
 * replacing them would blank out ordinary words and numbers all over a message.
 */
const MIN_SECRET_LENGTH = 6;

/** The values a message about `target` must not contain: header and environment values, whole and as sent. */
export function secretsOf(target: Target): string[] {
  return secretValues(Object.values((target.kind === 'stdio' ? target.env : target.headers) ?? {}));
}

/** Each value, trimmed, its credential part ("Bearer abc…" → "abc…"), and their JSON and URL escapes. */
export function secretValues(values: readonly string[]): string[] {
  const out = new Set<string>();
  for (const v of values) {
    const trimmed = v.trim();
    out.add(trimmed);
    const scheme = /^\S+\s+(\S.*)$/.exec(trimmed);
    if (scheme) out.add(scheme[1]);
  }
  for (const v of [...out]) {
    out.add(JSON.stringify(v).slice(1, -1));
    out.add(encodeURIComponent(v));
  }
  return [...out].filter((v) => v.length >= MIN_SECRET_LENGTH).sort((a, b) => b.length - a.length);
}

/** `text` with every occurrence of each secret replaced by [redacted] (longest first, so no part survives). */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) if (s.length >= MIN_SECRET_LENGTH) out = out.split(s).join(REDACTED);
  return out;
}
