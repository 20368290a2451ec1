/**
 * McpSession: one logical conversation with an MCP server that survives the server process dying or its HTTP
 * session expiring (the next request reconnects). Listing follows cursors to the end; tool calls come back as
 * ToolCallOutcome data, never as exceptions, unless the server cannot be reached at all.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ErrorCode,
  McpError,
  ToolListChangedNotificationSchema,
  type CallToolResult,
  type Prompt,
  type Resource,
  type ResourceTemplate,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { toToolInfo } from './catalog.js';
import { isConnectionLost, isRequestNotDelivered, openConnection, type Connection, type TransportKind } from './connection.js';
import { errorLine } from '../util/errors.js';
import { McpConnectError, McpListError } from './errors.js';
import { capText, DEFAULT_MAX_OUTPUT_CHARS, mediaBlocks, resultToText } from './normalize.js';
import { callSetting, refusedWritesLine, SafetyPolicy, type CallSetting } from './policy.js';
import { checkSandboxFrom, createSandbox, removeSandbox, rolloutStateIsolated, sandboxTarget, targetUsesSandbox, type IsolationOptions } from './sandbox.js';
import type { CallToolOptions, Target, ToolCallOutcome, ToolInfo } from './types.js';

export interface ConnectOptions {
  /** Timeout for connecting and initializing (also for each list request), in ms. Default 30000. */
  timeoutMs?: number;
  /** Which tools may run. Default `new SafetyPolicy()`: read-only and non-destructive tools run, others are refused. */
  policy?: SafetyPolicy;
  /** Default timeout of one tool call, in ms. Default 60000. */
  callTimeoutMs?: number;
  /** Default output cap of one tool result, in characters. Default 20000. */
  maxOutputChars?: number;
  /** clientInfo.name sent to the server. Default "mcprl". */
  clientName?: string;
  /** Bound on pages per list request before giving up on a cursor that never ends. Default 1000. */
  maxPages?: number;
  /** Receives what a stdio server writes to stderr (by default it is only kept for error messages). */
  onStderr?: (chunk: string) => void;
  /**
   * The server is a fresh process that this session alone uses (one rollout under --isolate). Tools that write run
   * only then, and only when its state is its own too: the target names `{sandbox}`, or `stateInMemory` (see
   * rolloutStateIsolated in sandbox.ts). Only stdio targets can be isolated. Default false.
   */
  isolated?: boolean;
  /**
   * Copied into the session's `{sandbox}` directory (see sandbox.ts); a target that names no `{sandbox}` is refused
   * (SandboxError). Default: the sandbox starts empty.
   */
  sandboxFrom?: string;
  /** The user's word that the target keeps its state in memory only (IsolationSchema.stateInMemory). Default false. */
  stateInMemory?: boolean;
}

/** Who the server said it is at initialize. */
export interface ServerIdentity {
  name: string;
  version: string;
  protocolVersion: string;
}

const CLIENT_VERSION = '0.1.0';

/** The SDK's messages when a server's structuredContent breaks (or omits) its own outputSchema. */
function isOutputSchemaViolation(err: unknown): boolean {
  return (
    err instanceof McpError &&
    /Structured content does not match|has an output schema but did not return structured content|Failed to validate structured content/.test(
      err.message,
    )
  );
}

/**
 * JSON-RPC errors with which a server refuses a request before running it (the MCP spec has tools report their own
 * failures as results): no such method or tool, invalid request or parameters. Any other error may come from a
 * handler that had started, so its call's outcome is unknown.
 */
function rejectedUnrun(err: unknown): boolean {
  return err instanceof McpError && [ErrorCode.MethodNotFound, ErrorCode.InvalidParams, ErrorCode.InvalidRequest].includes(err.code);
}

/** How servers answer a call to a tool they do not have (the TypeScript SDK: "Tool x not found"/"disabled"; others: "Unknown tool"). */
const UNKNOWN_TOOL_ANSWER = /\b(unknown tool|no such tool|tool \S+ (not found|disabled|is disabled|does not exist))\b/i;

export class McpSession {
  private conn: Connection | undefined;
  /** True once the current connection is known to be dead (process exited, transport closed). */
  private stale = false;
  private reconnecting: Promise<Connection> | undefined;
  private closed = false;
  private identity: ServerIdentity;
  /** The tool catalog as listed over `catalogConn`; refreshed after a reconnect or a list_changed notice. */
  private catalog: Map<string, ToolInfo> | undefined;
  private catalogConn: Connection | undefined;

  readonly policy: SafetyPolicy;
  private readonly timeoutMs: number;
  private readonly callTimeoutMs: number;
  private readonly maxOutputChars: number;
  private readonly maxPages: number;
  /** Where this session's tool calls run, for the safety policy: isolated or not, and what to change if not. */
  private readonly setting: CallSetting;

  private constructor(
    /** What runs: the target with `{sandbox}` replaced by this session's sandbox directory. */
    readonly target: Target,
    private readonly opts: ConnectOptions,
    first: Connection,
    /** The session's own `{sandbox}` directory, removed at close; undefined when the target names none. */
    readonly sandboxDir: string | undefined,
    /** The target as given, `{sandbox}` and all: what the isolation rule and a refusal's advice look at. */
    given: Target,
  ) {
    this.setting = callSetting(given, { isolate: opts.isolated === true, sandboxFrom: opts.sandboxFrom, stateInMemory: opts.stateInMemory === true });
    this.policy = opts.policy ?? new SafetyPolicy();
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.callTimeoutMs = opts.callTimeoutMs ?? 60_000;
    this.maxOutputChars = opts.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
    this.maxPages = opts.maxPages ?? 1000;
    this.identity = { name: '', version: '', protocolVersion: '' };
    this.adopt(first);
  }

  /** Connects to `target` and completes initialize; throws McpConnectError with a code when it cannot. */
  static async connect(target: Target, opts: ConnectOptions = {}): Promise<McpSession> {
    checkSandboxFrom(target, opts.sandboxFrom);
    const sandboxDir = targetUsesSandbox(target) ? await createSandbox(opts.sandboxFrom) : undefined;
    const running = sandboxDir === undefined ? target : sandboxTarget(target, sandboxDir);
    try {
      const first = await openConnection(running, McpSession.openOptions(opts));
      return new McpSession(running, opts, first, sandboxDir, target);
    } catch (err) {
      if (sandboxDir !== undefined) await removeSandbox(sandboxDir);
      throw err;
    }
  }

  private static openOptions(opts: ConnectOptions) {
    return {
      timeoutMs: opts.timeoutMs ?? 30_000,
      clientName: opts.clientName ?? 'mcprl',
      clientVersion: CLIENT_VERSION,
      onStderr: opts.onStderr,
    };
  }

  /** The server's name and version and the negotiated protocol version (as of the latest connection). */
  get server(): ServerIdentity {
    return this.identity;
  }

  /** The stdio server's process id (of the current connection), undefined for HTTP targets. */
  get pid(): number | undefined {
    return this.conn?.pid;
  }

  /**
   * False once the current connection is known to be dead (the stdio process exited, the transport closed) or the
   * session was closed; the next request then reconnects (unless closed).
   */
  get connected(): boolean {
    return !this.closed && this.conn !== undefined && !this.stale;
  }

  /** Which transport the current connection uses ('sse' means the HTTP server needed the SSE fallback). */
  get transportKind(): TransportKind | undefined {
    return this.conn?.kind;
  }

  private adopt(conn: Connection): void {
    this.conn = conn;
    this.stale = false;
    const info = conn.client.getServerVersion();
    this.identity = { name: info?.name ?? '', version: info?.version ?? '', protocolVersion: conn.protocolVersion };
    conn.client.onclose = () => {
      if (this.conn === conn) this.stale = true;
    };
    // Errors also surface on the pending requests; this only stops the SDK from logging them to the console.
    conn.client.onerror = () => undefined;
    if (conn.client.getServerCapabilities()?.tools?.listChanged) {
      conn.client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
        if (this.conn === conn) this.catalogConn = undefined;
      });
    }
  }

  /** The live connection, reconnecting first when the previous one died. Concurrent callers share one reconnect. */
  private async live(): Promise<Connection> {
    if (this.closed) throw new McpConnectError('CONFIG', 'this MCP session was closed');
    if (this.conn && !this.stale) return this.conn;
    if (!this.reconnecting) {
      const old = this.conn;
      this.reconnecting = (async () => {
        await old?.client.close().catch(() => undefined);
        const fresh = await openConnection(this.target, McpSession.openOptions(this.opts));
        if (this.closed) {
          await fresh.client.close().catch(() => undefined);
          throw new McpConnectError('CONFIG', 'this MCP session was closed');
        }
        this.adopt(fresh);
        return fresh;
      })().finally(() => {
        this.reconnecting = undefined;
      });
    }
    return this.reconnecting;
  }

  /** Marks `conn` dead so that the next request reconnects. */
  private invalidate(conn: Connection): void {
    if (this.conn === conn) this.stale = true;
  }

  /**
   * Runs a request that is safe to repeat (listing). When the connection turns out dead, reconnects once and
   * repeats it.
   */
  private async idempotent<T>(fn: (client: Client) => Promise<T>): Promise<T> {
    const conn = await this.live();
    try {
      return await fn(conn.client);
    } catch (err) {
      if (!(isRequestNotDelivered(err) || isConnectionLost(err)) && !this.stale) throw err;
      this.invalidate(conn);
      const again = await this.live();
      return fn(again.client);
    }
  }

  /** Follows nextCursor to the end, with a bound and loop detection. */
  private async paginate<T>(
    what: string,
    supported: (client: Client) => boolean,
    page: (client: Client, cursor: string | undefined) => Promise<{ items: T[]; nextCursor?: string }>,
  ): Promise<T[]> {
    return this.idempotent(async (client) => {
      if (!supported(client)) return [];
      const items: T[] = [];
      const seen = new Set<string>();
      let cursor: string | undefined;
      for (let n = 0; ; n++) {
        if (n >= this.maxPages) {
          throw new McpListError('TOO_MANY_PAGES', `listing ${what} did not end after ${this.maxPages} pages (the server keeps returning a nextCursor)`);
        }
        let result: { items: T[]; nextCursor?: string };
        try {
          result = await page(client, cursor);
        } catch (err) {
          // A server that declares a capability but does not implement the list method has nothing to list.
          if (err instanceof McpError && err.code === ErrorCode.MethodNotFound) return [];
          if (isRequestNotDelivered(err) || isConnectionLost(err)) throw err;
          throw new McpListError('REQUEST_FAILED', `listing ${what} failed: ${errorLine(err)}`, { cause: err });
        }
        items.push(...result.items);
        const next = result.nextCursor;
        if (next === undefined || next === null || next === '') return items;
        if (seen.has(next)) {
          throw new McpListError('CURSOR_LOOP', `listing ${what}: the server returned cursor ${JSON.stringify(next)} twice`);
        }
        seen.add(next);
        cursor = next;
      }
    });
  }

  private async listRawTools(): Promise<{ conn: Connection; tools: Tool[] }> {
    const tools = await this.paginate<Tool>(
      'tools',
      (c) => Boolean(c.getServerCapabilities()?.tools),
      async (c, cursor) => {
        // client.listTools (not a raw request) so that the SDK caches output-schema validators for callTool.
        const r = await c.listTools(cursor ? { cursor } : {}, { timeout: this.timeoutMs });
        return { items: r.tools, nextCursor: r.nextCursor };
      },
    );
    // paginate may have reconnected; the tools belong to whichever connection is current now.
    return { conn: await this.live(), tools };
  }

  /** Every tool the server offers (all pages), with annotation defaults filled in. */
  async listTools(): Promise<ToolInfo[]> {
    const { conn, tools } = await this.listRawTools();
    const infos = tools.map(toToolInfo);
    this.catalog = new Map(infos.map((t) => [t.name, t]));
    this.catalogConn = conn;
    return infos;
  }

  async listResources(): Promise<Resource[]> {
    return this.paginate<Resource>(
      'resources',
      (c) => Boolean(c.getServerCapabilities()?.resources),
      async (c, cursor) => {
        const r = await c.listResources(cursor ? { cursor } : {}, { timeout: this.timeoutMs });
        return { items: r.resources, nextCursor: r.nextCursor };
      },
    );
  }

  async listResourceTemplates(): Promise<ResourceTemplate[]> {
    return this.paginate<ResourceTemplate>(
      'resource templates',
      (c) => Boolean(c.getServerCapabilities()?.resources),
      async (c, cursor) => {
        const r = await c.listResourceTemplates(cursor ? { cursor } : {}, { timeout: this.timeoutMs });
        return { items: r.resourceTemplates, nextCursor: r.nextCursor };
      },
    );
  }

  async listPrompts(): Promise<Prompt[]> {
    return this.paginate<Prompt>(
      'prompts',
      (c) => Boolean(c.getServerCapabilities()?.prompts),
      async (c, cursor) => {
        const r = await c.listPrompts(cursor ? { cursor } : {}, { timeout: this.timeoutMs });
        return { items: r.prompts, nextCursor: r.nextCursor };
      },
    );
  }

  /** The catalog for the current connection (listing again after a reconnect, so output validators exist). */
  private async currentCatalog(): Promise<Map<string, ToolInfo>> {
    const conn = await this.live();
    if (!this.catalog || this.catalogConn !== conn) await this.listTools();
    return this.catalog!;
  }

  /**
   * Calls a tool and returns what a model should read. Never throws for tool-level failures: an unknown tool, a
   * policy refusal, a timeout, a cancellation, a server error, output that breaks the tool's outputSchema, or a
   * server that died during the call all come back with `isError: true` and a message naming the tool. It
   * throws McpConnectError only when the server cannot be reached or restarted at all.
   */
  async callTool(name: string, args: Record<string, unknown>, opts: CallToolOptions = {}): Promise<ToolCallOutcome> {
    const started = performance.now();
    const maxChars = opts.maxChars ?? this.maxOutputChars;
    const timeoutMs = opts.timeoutMs ?? this.callTimeoutMs;
    const fail = (message: string, execution: ToolCallOutcome['execution']): ToolCallOutcome => {
      const { text, truncated } = capText(message, maxChars);
      return { execution, text, isError: true, truncated, latencyMs: performance.now() - started };
    };

    let catalog = await this.currentCatalog();
    let tool = catalog.get(name);
    if (!tool) {
      // The server may have added the tool since we listed; look once more before calling it unknown.
      await this.listTools();
      catalog = this.catalog!;
      tool = catalog.get(name);
    }
    if (!tool) {
      const known = [...catalog.keys()];
      return fail(`Unknown tool '${name}'. This server's tools are: ${known.length ? known.join(', ') : '(none)'}.`, 'not_executed');
    }
    const decision = this.policy.check(tool, this.setting);
    if (!decision.allowed) return { ...fail(decision.reason, 'not_executed'), refused: { remedy: decision.remedy } };
    if (opts.signal?.aborted) return fail(`Tool '${name}' was cancelled before it started.`, 'not_executed');

    const requestOptions = { timeout: timeoutMs, signal: opts.signal };
    const invoke = async (conn: Connection): Promise<CallToolResult> => {
      if (tool.taskSupport !== 'required') return (await conn.client.callTool({ name, arguments: args }, undefined, requestOptions)) as CallToolResult;
      // A task-only tool: the SDK creates the task, polls its status and fetches the result; the stream ends with
      // the result or an error, which is thrown like a plain call's.
      for await (const message of conn.client.experimental.tasks.callToolStream({ name, arguments: args }, undefined, requestOptions)) {
        if (message.type === 'result') return message.result as CallToolResult;
        if (message.type === 'error') throw message.error;
      }
      throw new Error('the task ended without a result');
    };

    let conn = await this.live();
    let result: CallToolResult;
    try {
      try {
        result = await invoke(conn);
      } catch (err) {
        // An expired HTTP session or a connection that was already gone: the server never saw the call.
        if (!isRequestNotDelivered(err)) throw err;
        this.invalidate(conn);
        await this.currentCatalog();
        conn = await this.live();
        result = await invoke(conn);
      }
    } catch (err) {
      if (err instanceof McpConnectError) throw err;
      if (opts.signal?.aborted) return fail(`Tool '${name}' was cancelled (the server was told to stop).`, 'unknown');
      if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) {
        return fail(`Tool '${name}' timed out after ${timeoutMs} ms; the call was cancelled.`, 'unknown');
      }
      if (isOutputSchemaViolation(err)) {
        return fail(`Tool '${name}' returned output that breaks its own outputSchema: ${errorLine(err)}`, 'executed');
      }
      if (isConnectionLost(err) || this.stale) {
        this.invalidate(conn);
        return fail(
          `Tool '${name}' failed: the connection to the server was lost during the call (${errorLine(err)}); ` +
            'it is not known whether the tool ran. The next call reconnects.',
          'unknown',
        );
      }
      return fail(`Tool '${name}' failed: ${errorLine(err)}`, rejectedUnrun(err) ? 'not_executed' : 'unknown');
    }

    const { text, truncated } = capText(resultToText(result), maxChars);
    // A server whose tool list changed without notice may answer a call to a tool it no longer has with an error
    // result (the SDKs do): when the answer says so and a fresh list confirms it, the tool did not run.
    const gone = result.isError === true && UNKNOWN_TOOL_ANSWER.test(text) && !(await this.listTools().catch(() => [tool])).some((t) => t.name === name);
    const outcome: ToolCallOutcome = {
      execution: gone ? 'not_executed' : 'executed',
      text,
      isError: result.isError === true,
      truncated,
      latencyMs: performance.now() - started,
    };
    if (result.structuredContent !== undefined) outcome.structuredContent = result.structuredContent;
    const media = mediaBlocks(result);
    if (media.length) outcome.media = media;
    return outcome;
  }

  /** Ends the session: terminates the HTTP session (best effort) and stops a stdio server's process. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.closeConnection();
    } finally {
      if (this.sandboxDir !== undefined) await removeSandbox(this.sandboxDir);
    }
  }

  private async closeConnection(): Promise<void> {
    await this.reconnecting?.catch(() => undefined);
    const conn = this.conn;
    this.conn = undefined;
    if (!conn) return;
    if (conn.transport instanceof StreamableHTTPClientTransport && conn.transport.sessionId && !this.stale) {
      // Tell the server it can drop the session; servers that do not support DELETE answer 405, which is fine.
      await Promise.race([
        conn.transport.terminateSession().catch(() => undefined),
        new Promise((r) => setTimeout(r, 2000).unref()),
      ]);
    }
    await conn.client.close().catch(() => undefined);
  }
}

/** Connects to an MCP server. See McpSession and ConnectOptions. */
export function connect(target: Target, opts?: ConnectOptions): Promise<McpSession> {
  return McpSession.connect(target, opts);
}

/**
 * Opens a fresh server whose state is its own, for the write tasks that scenario generation makes and replays; or
 * undefined when `isolation` gives none on `target` (rolloutStateIsolated), and then nothing is written.
 */
export function isolatedServerOpener(target: Target, isolation: IsolationOptions, opts: ConnectOptions = {}): (() => Promise<McpSession>) | undefined {
  if (!rolloutStateIsolated(target, isolation)) return undefined;
  return () => connect(target, { ...opts, sandboxFrom: isolation.sandboxFrom, stateInMemory: isolation.stateInMemory, isolated: true });
}

/**
 * The one line naming the write tools that `opts.policy` refuses on `target` under `isolation` and the change that
 * makes them run (refusedWritesLine), or undefined when none is refused. `tools` when already listed; otherwise
 * this connects once to list them.
 */
export async function refusedWrites(target: Target, isolation: IsolationOptions, opts: ConnectOptions = {}, tools?: readonly ToolInfo[]): Promise<string | undefined> {
  const policy = opts.policy ?? new SafetyPolicy();
  checkSandboxFrom(target, isolation.sandboxFrom);
  if (!tools) {
    const session = await connect(target, { ...opts, sandboxFrom: isolation.sandboxFrom });
    try {
      tools = await session.listTools();
    } finally {
      await session.close();
    }
  }
  return refusedWritesLine(tools, policy, callSetting(target, isolation));
}
