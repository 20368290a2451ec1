/** How `mcprl serve --adapter` names an adapter: `NAME=DIR`, or just `DIR`. */
import { adapterNameFromDir } from '../chat/chat-engine.js';

/** `NAME=DIR` or just `DIR` (served under the folder's name). */
export function parseAdapterSpec(spec: string): { name: string; dir: string } {
  const eq = spec.indexOf('=');
  // A `=` inside a path (rare) is only a separator when what precedes it looks like a name.
  if (eq > 0 && /^[A-Za-z0-9._:-]+$/.test(spec.slice(0, eq))) return { name: spec.slice(0, eq), dir: spec.slice(eq + 1) };
  return { name: adapterNameFromDir(spec), dir: spec };
}
