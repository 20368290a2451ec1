/** Speaking of a server's `{sandbox}` directory as `{sandbox}`, in what generation sends and reads. */
import { realpathSync } from 'node:fs';
import { SANDBOX_PLACEHOLDER } from '../../mcp/sandbox.js';
import { replaceSandbox } from '../scenario.js';
import type { ScenarioServer } from './types.js';
import { isPlainObject } from './values.js';

/**
 * A server whose `{sandbox}` directory is spoken of as `{sandbox}`: the placeholder in arguments becomes the
 * directory, and the directory in results becomes the placeholder. So what generation harvests, asks and checks
 * holds no absolute sandbox path, and a scenario made on one sandbox reads the same on the next.
 */
export function withPlaceholder<T extends ScenarioServer>(server: T): T {
  const dir = server.sandboxDir;
  if (dir === undefined) return server;
  const dirs = [...new Set([dir, safeRealpath(dir)])].sort((a, b) => b.length - a.length);
  const toPlaceholder = <V>(v: V): V => {
    if (typeof v === 'string') return dirs.reduce((s, d) => s.split(d).join(SANDBOX_PLACEHOLDER), v as string) as V;
    if (Array.isArray(v)) return v.map(toPlaceholder) as V;
    if (isPlainObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toPlaceholder(x)])) as V;
    return v;
  };
  const callTool: ScenarioServer['callTool'] = async (name, args, o) => {
    const out = await server.callTool(name, replaceSandbox(args, dir), o);
    return { ...out, text: toPlaceholder(out.text), ...(out.structuredContent !== undefined ? { structuredContent: toPlaceholder(out.structuredContent) } : {}) };
  };
  // A proxy rather than a copy: the session's own methods keep running on the session itself.
  return new Proxy(server, {
    get(target, prop) {
      if (prop === 'callTool') return callTool;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

function safeRealpath(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    return dir;
  }
}
