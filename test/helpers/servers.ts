/**
 * Shared helpers that start real MCP servers for tests: the bookshop fixture (stdio and HTTP), the published
 * server-everything (stdio and streamable HTTP), and the small purpose-built servers in this folder.
 * Other test files build on these; keep their signatures stable.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import type { Target } from '../../src/mcp/types.js';

/** The repository root (tsx resolves from here, so child processes run with it as cwd). */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export const FIXTURE_SERVER_MAIN = path.join(REPO_ROOT, 'fixtures', 'server', 'main.ts');
export const EVERYTHING_MAIN = path.join(REPO_ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');

/** A stdio Target that runs a TypeScript file with `node --import tsx` from the repository root. */
export function tsStdioTarget(file: string, args: string[] = []): Target {
  return { kind: 'stdio', command: process.execPath, args: ['--import', 'tsx', file, ...args], cwd: REPO_ROOT };
}

/** The bookshop fixture server over stdio. Each connect spawns a fresh process, hence fresh state. */
export function fixtureStdioTarget(): Target {
  return tsStdioTarget(FIXTURE_SERVER_MAIN);
}

/** @modelcontextprotocol/server-everything over stdio. */
export function everythingStdioTarget(): Target {
  return { kind: 'stdio', command: process.execPath, args: [EVERYTHING_MAIN, 'stdio'], cwd: REPO_ROOT };
}

/** A port that was free a moment ago (the OS picks it; we release it immediately). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export interface RunningHttpServer {
  /** The MCP endpoint, e.g. http://127.0.0.1:43123/mcp (for SSE servers: the SSE endpoint). */
  url: string;
  port: number;
  /** The server process. */
  child: ChildProcess;
  /** Everything the server wrote to stderr so far (for failure messages). */
  stderr(): string;
  /** Stops the process (SIGTERM, then SIGKILL after 3 s) and waits until it has exited. */
  stop(): Promise<void>;
}

export interface SpawnHttpOptions {
  command: string;
  args: string[];
  env?: Record<string, string>;
  /** Matched against stdout+stderr; group 1 must be the port (or use `port` when it is known in advance). */
  ready: RegExp;
  port?: number;
  /** Path of the endpoint on the server, default "/mcp". */
  endpoint?: string;
  /** How long to wait for the ready line, default 20000 ms. */
  timeoutMs?: number;
}

/** Spawns an HTTP MCP server process and resolves once it printed its ready line. */
export async function spawnHttpServer(opts: SpawnHttpOptions): Promise<RunningHttpServer> {
  const child = spawn(opts.command, opts.args, {
    cwd: REPO_ROOT,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not become ready in ${opts.timeoutMs ?? 20000} ms; output:\n${out}${err}`));
    }, opts.timeoutMs ?? 20000);
    const check = () => {
      const m = opts.ready.exec(out + err);
      if (m) {
        clearTimeout(timer);
        resolve(opts.port ?? Number(m[1]));
      }
    };
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      check();
    });
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      check();
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? signal}) before it was ready; output:\n${out}${err}`));
    });
  });
  return {
    url: `http://127.0.0.1:${port}${opts.endpoint ?? '/mcp'}`,
    port,
    child,
    stderr: () => err,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(t);
    },
  };
}

/**
 * The bookshop fixture server over streamable HTTP on 127.0.0.1. Port 0 (the default) lets the server pick a
 * free port; pass a port to restart a stopped server on the same URL (its sessions are then unknown: 404).
 */
export async function startFixtureHttp(opts: { port?: number } = {}): Promise<RunningHttpServer> {
  return spawnHttpServer({
    command: process.execPath,
    args: ['--import', 'tsx', FIXTURE_SERVER_MAIN, '--http', String(opts.port ?? 0)],
    ready: /listening on http:\/\/127\.0\.0\.1:(\d+)\/mcp/,
  });
}

/** server-everything in its streamableHttp mode (it listens on $PORT, on all interfaces). */
export async function startEverythingHttp(): Promise<RunningHttpServer> {
  const port = await freePort();
  return spawnHttpServer({
    command: process.execPath,
    args: [EVERYTHING_MAIN, 'streamableHttp'],
    env: { PORT: String(port) },
    port,
    ready: /listening on port/i,
  });
}

export const PAGING_SERVER = path.join(REPO_ROOT, 'test', 'helpers', 'paging-server.ts');
export const MISBEHAVING_SERVER = path.join(REPO_ROOT, 'test', 'helpers', 'misbehaving-server.ts');
export const SSE_SERVER = path.join(REPO_ROOT, 'test', 'helpers', 'sse-server.ts');

/** The paging test server (two items per page); mode 'endless' never stops paging, 'loop' repeats a cursor. */
export function pagingStdioTarget(mode: 'normal' | 'endless' | 'loop' = 'normal'): Target {
  return tsStdioTarget(PAGING_SERVER, mode === 'normal' ? [] : [`--${mode}`]);
}

/** The misbehaving test server (crash, hang, huge output, broken outputSchema, media, an unannotated tool). */
export function misbehavingStdioTarget(): Target {
  return tsStdioTarget(MISBEHAVING_SERVER);
}

/** The bookshop over the legacy HTTP+SSE transport only; `url` is its /sse endpoint. */
export async function startSseOnlyServer(): Promise<RunningHttpServer> {
  return spawnHttpServer({
    command: process.execPath,
    args: ['--import', 'tsx', SSE_SERVER],
    ready: /listening on http:\/\/127\.0\.0\.1:(\d+)\/sse/,
    endpoint: '/sse',
  });
}

/** True while a process with this pid exists. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export const MEMORY_MAIN = path.join(REPO_ROOT, 'node_modules', '@modelcontextprotocol', 'server-memory', 'dist', 'index.js');
export const FILESYSTEM_MAIN = path.join(REPO_ROOT, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');

/** @modelcontextprotocol/server-memory over stdio, keeping its graph in `memoryFile` (may hold `{sandbox}`). */
export function memoryTarget(memoryFile: string): Target {
  return { kind: 'stdio', command: process.execPath, args: [MEMORY_MAIN], env: { MEMORY_FILE_PATH: memoryFile }, cwd: REPO_ROOT };
}

/** @modelcontextprotocol/server-filesystem over stdio, serving `root` (may be `{sandbox}`). */
export function filesystemTarget(root: string): Target {
  return { kind: 'stdio', command: process.execPath, args: [FILESYSTEM_MAIN, root], cwd: REPO_ROOT };
}

/** A few entities in server-memory's JSONL format, as a user's memory file would hold them. */
export const SEEDED_MEMORY = [
  { type: 'entity', name: 'Ada Lovelace', entityType: 'person', observations: ['wrote the first program', 'born in London'] },
  { type: 'entity', name: 'Analytical Engine', entityType: 'machine', observations: ['designed by Charles Babbage'] },
  { type: 'entity', name: 'Charles Babbage', entityType: 'person', observations: ['mathematician'] },
  { type: 'relation', from: 'Ada Lovelace', to: 'Analytical Engine', relationType: 'wrote notes on' },
  { type: 'relation', from: 'Charles Babbage', to: 'Analytical Engine', relationType: 'designed' },
]
  .map((x) => JSON.stringify(x))
  .join('\n');

/** A fresh temp folder holding SEEDED_MEMORY as memory.jsonl: server-memory's file, for `sandboxFrom`. */
export function folderWithSeededMemory(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-memory-seed-'));
  writeFileSync(path.join(dir, 'memory.jsonl'), SEEDED_MEMORY);
  return dir;
}

/** A handful of files, as a user's folder served by server-filesystem would hold them. */
export const USER_FILES: Record<string, string> = {
  'notes.txt': 'Shopping: apples, pears, walnuts.\n',
  'todo.md': '# Todo\n- call the plumber\n- renew passport\n',
  'config.json': JSON.stringify({ name: 'demo', port: 8080 }, null, 2) + '\n',
};

/** A valid 1×1 PNG (70 bytes): an image for server-filesystem's read_media_file. */
export const PIXEL_PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

/** USER_FILES and an image (pixel.png), as a folder with a picture in it would hold them. */
export const USER_FILES_WITH_IMAGE: Record<string, string | Buffer> = { ...USER_FILES, 'pixel.png': PIXEL_PNG };

/** A fresh temp folder holding USER_FILES_WITH_IMAGE. */
export function folderWithFilesAndImage(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-user-files-'));
  for (const [name, data] of Object.entries(USER_FILES_WITH_IMAGE)) writeFileSync(path.join(dir, name), data);
  return dir;
}

/** A fresh temp folder holding USER_FILES. */
export function folderWithFiles(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-user-files-'));
  for (const [name, text] of Object.entries(USER_FILES)) writeFileSync(path.join(dir, name), text);
  return dir;
}
