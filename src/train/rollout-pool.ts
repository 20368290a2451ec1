/**
 * Rollouts on remote inference servers: `mcprl train --rollout-url URL…`.
 *
 * A RolloutPool is a Policy over one or more OpenAI-compatible servers in vLLM's dialect (vLLM with runtime LoRA
 * updating, or `mcprl serve`). Requests go round robin to the servers with a free slot (at most
 * `concurrencyPerServer` in flight on each); the model name is the current adapter's. After each optimiser step
 * the trainer calls `publish`: the adapter is written to `adapterDir/policy-step-N` (a folder every server can
 * read), loaded on every server under that name (`POST /v1/load_lora_adapter`), rollouts switch to it, and the
 * previous adapter is unloaded (`POST /v1/unload_lora_adapter`) and its folder removed. Each turn names the adapter
 * that answered it (PolicyTurn.model, the completion's `model`); `stepOf` maps a published name back to its step,
 * and `at(name, temperature)` is a Policy fixed on one adapter (validation of a step, while later gathers may switch).
 * Like any policy, the pool samples as it was made to (`temperature`, `maxTokens`); `at` names its own temperature.
 *
 * A server that fails (unreachable, a 5xx, a lost adapter) is retried `attempts` times, then dropped from the
 * pool with a warning, and the request goes to another server. Only when no server is left does a request (and
 * so the step) fail, with McprlError `ROLLOUT_POOL_EMPTY`. A request the server refuses as a bad request
 * (4xx other than a missing model) is the request's failure, not the server's, and is passed on as it is.
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { copyPeftAdapter } from '../hf/peft.js';
import { OpenAIPolicy, PolicyError, type OpenAIPolicyOptions, type Policy, type PolicyRequest, type PolicyTurn } from '../agent/policy.js';
import { writeDirAtomic } from '../util/atomic.js';
import { McprlError } from '../util/errors.js';

/** The rollout servers of a run (not part of its config.json: a resumed run may use other servers). */
export const RolloutPoolSettingsSchema = z.object({
  /** Base URLs of the servers' OpenAI API, e.g. `http://gpu-1:8000/v1`. At least one. */
  urls: z.array(z.string().url()).min(1),
  /** A folder every server can read at the same path: each step's adapter is written to `policy-step-N` in it. */
  adapterDir: z.string().min(1),
  /** Requests in flight on one server at most. Default 8. */
  concurrencyPerServer: z.number().int().positive().default(8),
  /** Attempts of one request (or adapter load) on one server before the server is dropped. Default 3. */
  attempts: z.number().int().positive().default(3),
  /** Timeout of one request, in milliseconds. Default 120000. */
  timeoutMs: z.number().int().positive().default(120_000),
  /** Run validation rollouts on the servers too (false: on the trainer's engine). Default true. */
  validate: z.boolean().default(true),
  /**
   * The bearer token the servers want (`mcprl serve --token`, vLLM's `--api-key`), sent with every request and
   * adapter load. Default: none.
   */
  apiKey: z.string().min(1).optional(),
});
export type RolloutPoolSettings = z.input<typeof RolloutPoolSettingsSchema>;

/** What the pool tells its owner besides warnings: each answer and each adapter operation, per server. */
export interface RolloutPoolEvents {
  /** A chat completion came back from `url`. */
  onAnswer?: (url: string) => void;
  /** A server was dropped from the pool. */
  onDrop?: (url: string, why: string) => void;
}

/** How a pool's rollouts sample (OpenAIPolicyOptions' fields). */
type Sampling = Pick<OpenAIPolicyOptions, 'temperature' | 'maxTokens'>;

interface Server {
  url: string;
  inFlight: number;
  alive: boolean;
  /** An OpenAI client per adapter name and temperature in use (dropped when the adapter is unloaded). */
  clients: Map<string, OpenAIPolicy>;
  answers: number;
  retries: number;
}

/** Something the pool can write an adapter folder with: a trainer, or a saved checkpoint (checkpointAdapter). */
export interface AdapterWriter {
  saveAdapter(dir: string): Promise<void>;
}

/** The PEFT adapter of a saved checkpoint folder (adapter + optimiser state), copied without the optimiser state. */
export function checkpointAdapter(checkpoint: string): AdapterWriter {
  return {
    saveAdapter: (dir) => writeDirAtomic(dir, (tmp) => copyPeftAdapter(checkpoint, tmp)),
  };
}

export class RolloutPool implements Policy {
  private readonly s: z.output<typeof RolloutPoolSettingsSchema>;
  private readonly servers: Server[];
  private readonly waiting: (() => void)[] = [];
  private cursor = 0;
  private current: { name: string; dir: string } | null = null;
  /** The step of every adapter name this pool published. */
  private readonly steps = new Map<string, number>();
  private readonly sampling: Sampling;
  private readonly extraBody: Record<string, unknown>;
  private readonly log: (line: string) => void;
  private readonly events: RolloutPoolEvents;

  /** `temperature`, `maxTokens`: the sampling of the pool's own rollouts. Default: the servers'. */
  constructor(settings: RolloutPoolSettings, opts: Sampling & { extraBody?: Record<string, unknown>; log?: (line: string) => void; events?: RolloutPoolEvents } = {}) {
    const parsed = RolloutPoolSettingsSchema.safeParse(settings);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new McprlError('ROLLOUT_POOL_SETTINGS', `rollout servers: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
    }
    this.s = { ...parsed.data, adapterDir: path.resolve(parsed.data.adapterDir), urls: parsed.data.urls.map((u) => u.replace(/\/+$/, '')) };
    this.sampling = { temperature: opts.temperature, maxTokens: opts.maxTokens };
    this.extraBody = opts.extraBody ?? {};
    this.log = opts.log ?? ((l) => process.stderr.write(l + '\n'));
    this.events = opts.events ?? {};
    this.servers = this.s.urls.map((url) => ({ url, inFlight: 0, alive: true, clients: new Map(), answers: 0, retries: 0 }));
  }

  /** The adapter name rollouts use now (empty before the first publish). */
  get name(): string {
    return this.current?.name ?? '';
  }

  /** The step of an adapter this pool published under `name`, else undefined. */
  stepOf(name: string): number | undefined {
    return this.steps.get(name);
  }

  /**
   * A policy on these servers fixed on the adapter `name` (one this pool published and still serves), whatever
   * later publishes switch the pool's own rollouts to.
   */
  at(name: string, temperature: number | undefined): Policy {
    const sampling = { ...this.sampling, temperature };
    return { name, next: (req) => this.request(req, () => name, sampling) };
  }

  /** Whether validation rollouts run on the servers. */
  get validates(): boolean {
    return this.s.validate;
  }

  /** Servers still in the pool. */
  get alive(): string[] {
    return this.servers.filter((x) => x.alive).map((x) => x.url);
  }

  /** The servers left and dropped, and the requests answered and retried since the last call (a step's metrics). */
  takeStats(): { servers_alive: number; servers_dropped: number; rollout_requests: number; rollout_retries: number } {
    const out = {
      servers_alive: this.alive.length, servers_dropped: this.servers.length - this.alive.length,
      rollout_requests: this.servers.reduce((a, x) => a + x.answers, 0), rollout_retries: this.servers.reduce((a, x) => a + x.retries, 0),
    };
    for (const x of this.servers) x.answers = x.retries = 0;
    return out;
  }

  next(req: PolicyRequest): Promise<PolicyTurn> {
    // The adapter is looked up at each attempt: one retried after a publish goes to the new adapter.
    return this.request(req, () => this.name, this.sampling);
  }

  private async request(req: PolicyRequest, adapter: () => string, sampling: Sampling): Promise<PolicyTurn> {
    for (;;) {
      const server = await this.acquire();
      try {
        const turn = await this.attempt(server, () => {
          const name = adapter();
          return this.client(server, name, sampling).next(req).then((t) => (t.model === undefined ? { ...t, model: name } : t), (err: unknown) => {
            if (!serverFault(err)) throw new Refused(err);
            throw err;
          });
        }, 'chat completion');
        if (turn !== null) {
          server.answers += 1;
          this.events.onAnswer?.(server.url);
          return turn;
        }
        // The server was dropped: the request goes to another one.
      } catch (err) {
        if (err instanceof Refused) throw err.cause;
        throw err;
      } finally {
        this.release(server);
      }
    }
  }

  /**
   * Writes the trainer's adapter as `policy-step-N`, loads it on every server, switches rollouts to it and
   * unloads the previous one. A server that cannot load it is dropped; none left is McprlError `ROLLOUT_POOL_EMPTY`.
   */
  async publish(step: number, writer: AdapterWriter): Promise<void> {
    const name = `policy-step-${step}`;
    const dir = path.join(this.s.adapterDir, name);
    await writer.saveAdapter(dir);
    await Promise.all(this.servers.filter((x) => x.alive).map((x) => this.attempt(x, () => this.load(x.url, name, dir), `loading adapter ${name}`)));
    this.ensureAlive(`loading adapter ${name}`);
    const old = this.current;
    this.current = { name, dir };
    this.steps.set(name, step);
    if (old && old.name !== name) {
      for (const x of this.servers) for (const [key, c] of x.clients) if (c.name === old.name) x.clients.delete(key);
      // An old adapter left loaded only costs the server memory: a failed unload is a warning, not a drop.
      await Promise.all(this.servers.filter((x) => x.alive).map((x) =>
        this.post(x.url, 'unload_lora_adapter', { lora_name: old.name }).catch((err: unknown) => this.log(`warning: rollout server ${x.url}: unloading ${old.name} failed: ${(err as Error).message}`))));
      await rm(old.dir, { recursive: true, force: true });
    }
  }

  /** Unloads the current adapter from the servers still alive (best effort) and removes its folder. */
  async close(): Promise<void> {
    const cur = this.current;
    if (!cur) return;
    await Promise.all(this.servers.filter((x) => x.alive).map((x) => this.post(x.url, 'unload_lora_adapter', { lora_name: cur.name }).catch(() => undefined)));
    await rm(cur.dir, { recursive: true, force: true });
    this.current = null;
  }

  /** Runs `f` up to `attempts` times on `server`; after the last failure the server is dropped and null returned. */
  private async attempt<T>(server: Server, f: () => Promise<T>, what: string): Promise<T | null> {
    let last: unknown;
    for (let a = 1; a <= this.s.attempts; a++) {
      if (!server.alive) return null;
      try {
        return await f();
      } catch (err) {
        if (err instanceof Refused || (err instanceof PolicyError && err.code === 'POLICY_ABORTED')) throw err;
        last = err;
        if (a < this.s.attempts) server.retries += 1;
      }
    }
    this.drop(server, `${what} failed ${this.s.attempts} times (last: ${(last as Error)?.message ?? String(last)})`);
    return null;
  }

  private drop(server: Server, why: string): void {
    if (!server.alive) return;
    server.alive = false;
    const left = this.alive.length;
    this.log(`warning: rollout server ${server.url} dropped from the pool: ${why}; ${left} server${left === 1 ? '' : 's'} left`);
    this.events.onDrop?.(server.url, why);
    // Requests waiting for a slot may now have none to wait for: wake them to look again.
    for (const w of this.waiting.splice(0)) w();
  }

  /** Throws McprlError ROLLOUT_POOL_EMPTY when no server is left. */
  ensureAlive(what: string): void {
    if (this.alive.length === 0) throw new McprlError('ROLLOUT_POOL_EMPTY', `no rollout server left (${what}): every one of ${this.servers.map((x) => x.url).join(', ')} failed`);
  }

  /** The next alive server with a free slot, round robin; waits for one when all are busy. */
  private async acquire(): Promise<Server> {
    for (;;) {
      this.ensureAlive('chat completion');
      const n = this.servers.length;
      for (let k = 0; k < n; k++) {
        const x = this.servers[(this.cursor + k) % n];
        if (x.alive && x.inFlight < this.s.concurrencyPerServer) {
          this.cursor = (this.cursor + k + 1) % n;
          x.inFlight += 1;
          return x;
        }
      }
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
  }

  private release(server: Server): void {
    server.inFlight -= 1;
    this.waiting.shift()?.();
  }

  private client(server: Server, model: string, sampling: Sampling): OpenAIPolicy {
    const key = `${model}\0${sampling.temperature ?? ''}`;
    let c = server.clients.get(key);
    if (!c) {
      c = new OpenAIPolicy({ baseURL: server.url, model, ...sampling, ...(this.s.apiKey ? { apiKey: this.s.apiKey } : {}), tokenIds: true, maxRetries: 0, timeoutMs: this.s.timeoutMs, extraBody: this.extraBody });
      server.clients.set(key, c);
    }
    return c;
  }

  /**
   * Loads an adapter under `name`. A server that refuses it as a bad request may serve the name already (a run
   * resumed against servers that outlived it): that one is unloaded and the load tried once more.
   */
  private async load(url: string, name: string, dir: string): Promise<void> {
    const body = { lora_name: name, lora_path: dir };
    try {
      await this.post(url, 'load_lora_adapter', body);
    } catch (err) {
      if (!(err instanceof PolicyError && err.status === 400)) throw err;
      await this.post(url, 'unload_lora_adapter', { lora_name: name }).catch(() => undefined);
      await this.post(url, 'load_lora_adapter', body);
    }
  }

  private async post(url: string, route: string, body: unknown): Promise<void> {
    let res: Response;
    try {
      const headers: Record<string, string> = { 'content-type': 'application/json', ...(this.s.apiKey ? { authorization: `Bearer ${this.s.apiKey}` } : {}) };
      res = await fetch(`${url}/${route}`, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(this.s.timeoutMs) });
    } catch (err) {
      throw new PolicyError('POLICY_UNREACHABLE', `${url}/${route}: ${(err as Error).message}`, { cause: err });
    }
    if (!res.ok) throw new PolicyError('POLICY_HTTP', `${url}/${route} answered HTTP ${res.status}: ${(await res.text()).slice(0, 500)}`, { status: res.status });
    await res.arrayBuffer();
  }
}

/** A refusal that is the request's fault; carried through the retry loop unchanged. */
class Refused {
  constructor(readonly cause: unknown) {}
}

/** Whether a failed request says something about the server (retry, then drop) rather than about the request. */
function serverFault(err: unknown): boolean {
  if (!(err instanceof PolicyError)) return true;
  if (err.code === 'POLICY_ABORTED') return false;
  if (err.code !== 'POLICY_HTTP') return true;
  // 404: the server lost the adapter (restarted); 408/429: overloaded. Other 4xx: the request itself.
  return err.status === undefined || err.status >= 500 || err.status === 404 || err.status === 408 || err.status === 429;
}
