/**
 * The one guard of mcprl's local HTTP servers (`mcprl serve`, `mcprl backend`, `mcprl mcp --http`): what a request
 * must be before any handler sees it, and what an operator must give before a server binds.
 *
 * A web page the user visits can send requests to 127.0.0.1: a "simple" cross-site POST (`text/plain`, no preflight)
 * carries a JSON body just as well, and DNS rebinding lets a page of its own origin reach a loopback port. So every
 * request is checked, in this order, before its body is read:
 *  1. Host: a loopback name, the bound host, or one the operator allowed (port-agnostic, as the MCP SDK's check).
 *     A rebinding page sends its own name here.
 *  2. Origin (browsers send it): this server itself (scheme, host and port, as the Host header names it) or one
 *     the operator allowed. A page served by another local port is another origin.
 *  3. The bearer token, when the server has one.
 *  4. A body (POST, PUT, PATCH, or any request that declares one) must be `application/json`: a page can send
 *     only text/plain, form and multipart bodies without a CORS preflight, which these servers never answer.
 * Refusals are data (status, code, message): each server writes them in its own error shape.
 *
 * Binding: a server bound beyond loopback needs a token. Loopback is an address, not a string: a host name counts
 * as loopback only when every address it resolves to is (`127.attacker.example` is a name like any other).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { hostname as machineName, networkInterfaces } from 'node:os';
import { McprlError } from './errors.js';

/** Names every loopback server answers to, as URL's hostname writes them. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** True for an IP address literal (v4, v6, v4-mapped v6) in the loopback ranges. */
function isLoopbackAddress(address: string): boolean {
  const a = address.replace(/^\[|\]$/g, '').toLowerCase();
  if (isIP(a) === 4) return a.startsWith('127.');
  if (isIP(a) === 6) return a === '::1' || a === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(a);
  return false;
}

/**
 * True when only this machine can reach `host`: a loopback address, or a name every address of which is one.
 * A name that does not resolve is not loopback (the bind would fail anyway, or reach something else later).
 */
export async function isLoopback(host: string): Promise<boolean> {
  const bare = host.replace(/^\[|\]$/g, '');
  if (isIP(bare) !== 0) return isLoopbackAddress(bare);
  try {
    const addresses = await lookup(bare, { all: true });
    return addresses.length > 0 && addresses.every((a) => isLoopbackAddress(a.address));
  } catch {
    return false;
  }
}

/** Checks a bearer token given to a server: a blank one would lock every client out, or (on loopback) none. */
export function checkToken(token: string): string {
  if (token === '' || /\s/.test(token)) {
    throw new McprlError('SERVER_CONFIG', token.trim() === '' ? 'the bearer token is empty or only whitespace' : 'the bearer token contains whitespace, which an Authorization header cannot carry');
  }
  return token;
}

/**
 * Refuses to bind `host` beyond loopback without a token. `what` names the server and `how` says how to give one
 * (`--token`), for the message.
 */
export async function checkBind(host: string, token: string | undefined, what: string, how = '--token'): Promise<void> {
  if (token === undefined && !(await isLoopback(host))) {
    throw new McprlError('SERVER_CONFIG', `refusing to bind ${what} to ${host} without a token: ${host} is not a loopback address, so give ${how} (every request must then carry it) or bind 127.0.0.1`);
  }
}

/** A host name as URL (and so the Host check) writes it: lower case, IPv6 in brackets, IDN in punycode. */
export function canonicalHostname(name: string): string {
  const bracketed = name.includes(':') && !name.startsWith('[') ? `[${name}]` : name;
  try {
    return new URL(`http://${bracketed}`).hostname;
  } catch {
    throw new McprlError('SERVER_CONFIG', `${JSON.stringify(name)} is not a host name`);
  }
}

/** The canonical form of an origin (scheme://host[:port], default port dropped), or undefined if it is not one. */
export function canonicalOrigin(origin: string): string | undefined {
  try {
    const u = new URL(origin);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.origin : undefined;
  } catch {
    return undefined;
  }
}

export interface HttpGuardOptions {
  /** The address the server binds (Host may name it). A wildcard (0.0.0.0, ::) admits this machine's addresses and name. */
  host: string;
  /** Host names (without port) the Host header may carry besides the loopback names and the bound host. */
  allowedHosts?: readonly string[];
  /** Origins (scheme://host[:port]) a browser page may call from, besides the server's own. Default none. */
  allowedOrigins?: readonly string[];
  /** Bearer token every request must carry (but the `open` paths). Default none. */
  token?: string;
  /** Paths that need no token (`/health`). Default none. */
  open?: readonly string[];
}

/** Why a request was refused, for the server to write in its own error shape. */
export interface GuardRefusal {
  status: 401 | 403 | 415;
  code: 'forbidden_host' | 'forbidden_origin' | 'unauthorized' | 'unsupported_media_type';
  message: string;
}

/** The guard of one server: `check(req)` is null for a request that may go on to its handler. */
export interface HttpGuard {
  check(req: IncomingMessage): GuardRefusal | null;
  /** The host names the Host header may carry, as URL writes them. */
  readonly hosts: string[];
}

const WILDCARDS = new Set(['0.0.0.0', '[::]']);

export function createHttpGuard(opts: HttpGuardOptions): HttpGuard {
  const token = opts.token === undefined ? undefined : checkToken(opts.token);
  const bound = canonicalHostname(opts.host);
  // A server on every interface is reached by this machine's addresses and name; a page cannot rebind to those.
  const own = WILDCARDS.has(bound) ? [machineName(), ...Object.values(networkInterfaces()).flatMap((l) => (l ?? []).map((i) => i.address))] : [];
  const hosts = new Set([...LOOPBACK_NAMES, bound, ...own, ...(opts.allowedHosts ?? [])].map(canonicalHostname));
  const origins = new Set<string>();
  for (const o of opts.allowedOrigins ?? []) {
    const canonical = canonicalOrigin(o);
    if (!canonical) throw new McprlError('SERVER_CONFIG', `allowed origin ${JSON.stringify(o)} is not an http(s) origin`);
    origins.add(canonical);
  }
  const expected = token === undefined ? undefined : sha256(token);
  const open = new Set(opts.open ?? []);

  return {
    hosts: [...hosts],
    check(req) {
      const hostHeader = req.headers.host;
      let hostname: string | undefined;
      try {
        hostname = hostHeader ? new URL(`http://${hostHeader}`).hostname : undefined;
      } catch {
        hostname = undefined;
      }
      if (hostname === undefined || !hosts.has(hostname)) {
        return { status: 403, code: 'forbidden_host', message: `Forbidden: Host ${JSON.stringify(hostHeader ?? '')} is not this server (allow it with --allowed-host)` };
      }
      const origin = req.headers.origin;
      if (origin !== undefined) {
        const canonical = canonicalOrigin(origin);
        const scheme = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
        const self = canonicalOrigin(`${scheme}://${hostHeader}`);
        if (!canonical || (canonical !== self && !origins.has(canonical))) {
          return { status: 403, code: 'forbidden_origin', message: `Forbidden: origin ${JSON.stringify(origin)} is not allowed (allow it with --allowed-origin)` };
        }
      }
      const path = new URL(req.url ?? '/', 'http://localhost').pathname;
      if (expected && !open.has(path)) {
        const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '';
        // Hashing both sides gives equal lengths, as timingSafeEqual needs, whatever was sent.
        if (!timingSafeEqual(sha256(given), expected)) return { status: 401, code: 'unauthorized', message: 'missing or wrong bearer token' };
      }
      if (hasBody(req) && !isJson(req.headers['content-type'])) {
        return {
          status: 415,
          code: 'unsupported_media_type',
          message: `Unsupported Media Type: a request body must be sent as application/json (got ${JSON.stringify(req.headers['content-type'] ?? 'none')})`,
        };
      }
      return null;
    },
  };
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** True for a request that carries (or may carry) a body. */
function hasBody(req: IncomingMessage): boolean {
  const m = req.method ?? 'GET';
  if (m === 'POST' || m === 'PUT' || m === 'PATCH') return true;
  return req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
}

/** `application/json`, with parameters (`; charset=utf-8`) or none. */
function isJson(contentType: string | undefined): boolean {
  return contentType !== undefined && contentType.split(';')[0].trim().toLowerCase() === 'application/json';
}
