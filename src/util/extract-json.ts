/**
 * Finds the JSON value in a model's answer: the whole text, a ```json fenced block, the outermost braces or the
 * outermost brackets, tried in that order. Returns undefined when none of them parses, so each caller words its own
 * refusal (a dropped scenario answer, a judge error). A literal `null` answer comes back as null, not undefined.
 */
export function extractJson(text: string): unknown {
  const candidates: string[] = [text.trim()];
  const fence = /```(?:json)?\s*([\s\S]*?)```/i.exec(text);
  if (fence) candidates.push(fence[1].trim());
  const firstBrace = text.indexOf('{');
  const lastBrace = text.lastIndexOf('}');
  if (firstBrace >= 0 && lastBrace > firstBrace) candidates.push(text.slice(firstBrace, lastBrace + 1));
  const firstBracket = text.indexOf('[');
  const lastBracket = text.lastIndexOf(']');
  if (firstBracket >= 0 && lastBracket > firstBracket) candidates.push(text.slice(firstBracket, lastBracket + 1));
  for (const candidate of candidates) {
    try {
      return JSON.parse(candidate);
    } catch {
      // try the next candidate
    }
  }
  return undefined;
}
