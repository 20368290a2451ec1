/**
 * Which of the server's environment variables a client may name as an LLM API key, and where each may go.
 *
 * generate_scenarios and start_training talk to an OpenAI-compatible LLM whose base URL the client chooses; the
 * key comes from an environment variable of the mcprl server. Without a rule, a client could name any variable
 * (the server's own bearer token, a cloud credential) and have it sent to a URL of its choosing. So the operator
 * grants each variable for base URL prefixes (`mcprl mcp --allow-key-env VAR=URL`); OPENAI_API_KEY is granted for
 * https://api.openai.com/ by default. A request naming any other variable, or sending a granted one elsewhere, is
 * refused. A request that names no variable gets OPENAI_API_KEY where that is granted and no key anywhere else,
 * so local endpoints without keys keep working.
 */
import { McprlError } from '../util/errors.js';

/** One variable allowed for one base URL prefix. */
export interface KeyGrant {
  env: string;
  /** Base URLs the key may be sent to start with this: same scheme, host and port, and the path below it. */
  baseUrl: string;
}

export const DEFAULT_KEY_ENV = 'OPENAI_API_KEY';
export const DEFAULT_KEY_GRANTS: readonly KeyGrant[] = [{ env: DEFAULT_KEY_ENV, baseUrl: 'https://api.openai.com/' }];

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function parseHttpUrl(u: string, what: string): URL {
  let url: URL;
  try {
    url = new URL(u);
  } catch {
    throw new McprlError('API_KEY_NOT_ALLOWED', `${what} ${JSON.stringify(u)} is not a valid URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new McprlError('API_KEY_NOT_ALLOWED', `${what} must be http(s)://`);
  if (url.username || url.password) throw new McprlError('API_KEY_NOT_ALLOWED', `${what} must not carry credentials`);
  return url;
}

/**
 * True when `url` lies under `prefix`: the same origin (scheme, host, port) and a path equal to the prefix's or
 * below it at a segment boundary, so https://api.openai.com.evil.example/ and https://host/v1evil are not under
 * https://api.openai.com/ and https://host/v1.
 */
export function urlUnder(url: string, prefix: string): boolean {
  let u: URL;
  let p: URL;
  try {
    u = new URL(url);
    p = new URL(prefix);
  } catch {
    return false;
  }
  if (u.username || u.password || u.origin !== p.origin) return false;
  const dir = p.pathname.endsWith('/') ? p.pathname : `${p.pathname}/`;
  return u.pathname === p.pathname || `${u.pathname}/` === dir || u.pathname.startsWith(dir);
}

/** Parses `VAR=URL` as given to --allow-key-env. */
export function parseKeyGrant(spec: string): KeyGrant {
  const eq = spec.indexOf('=');
  const env = eq < 0 ? spec : spec.slice(0, eq);
  if (eq < 0 || !ENV_NAME.test(env)) throw new McprlError('API_KEY_NOT_ALLOWED', `--allow-key-env ${JSON.stringify(spec)}: expected VAR=BASE_URL, e.g. GROQ_API_KEY=https://api.groq.com/openai/v1`);
  return { env, baseUrl: parseHttpUrl(spec.slice(eq + 1), `--allow-key-env ${env}: the base URL`).href };
}

export interface ResolvedKey {
  /** The base URL to use (the one checked). */
  baseURL: string;
  /** The key to send, or undefined for none. */
  apiKey: string | undefined;
  /** The variable it came from. */
  env: string | undefined;
}

export class ApiKeyPolicy {
  readonly grants: readonly KeyGrant[];

  constructor(
    extra: KeyGrant[] = [],
    private readonly environment: NodeJS.ProcessEnv = process.env,
  ) {
    this.grants = [...DEFAULT_KEY_GRANTS, ...extra];
  }

  /**
   * The key for a request to `baseUrl` (default: $OPENAI_BASE_URL or OpenAI's) that names `env` (or nothing).
   * `what` names the argument in errors, e.g. "generator".
   */
  resolve(env: string | undefined, baseUrl: string | undefined, what: string): ResolvedKey {
    const baseURL = parseHttpUrl(baseUrl ?? this.environment.OPENAI_BASE_URL ?? 'https://api.openai.com/v1', `${what}.base_url`).href;
    const name = env ?? DEFAULT_KEY_ENV;
    const grants = this.grants.filter((g) => g.env === name);
    if (grants.some((g) => urlUnder(baseURL, g.baseUrl))) return { baseURL, apiKey: this.environment[name] || undefined, env: name };
    // Naming no variable asks for OpenAI's key only where it is granted; anywhere else no key is sent.
    if (env === undefined) return { baseURL, apiKey: undefined, env: undefined };
    if (grants.length === 0) {
      const granted = [...new Set(this.grants.map((g) => g.env))].join(', ');
      throw new McprlError('API_KEY_NOT_ALLOWED', 
        `${what}.api_key_env ${name} is not allowed: this server sends only ${granted} (the operator grants others with mcprl mcp --allow-key-env ${name}=<base URL>)`,
      );
    }
    throw new McprlError('API_KEY_NOT_ALLOWED', 
      `${what}.api_key_env ${name} may be sent only to ${grants.map((g) => g.baseUrl).join(', ')}, not to ${baseURL} (the operator grants more with mcprl mcp --allow-key-env ${name}=<base URL>)`,
    );
  }
}
