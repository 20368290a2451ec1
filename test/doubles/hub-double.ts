/**
 * A local HTTP server that speaks the Hugging Face hub's file API, for tests: the hub itself cannot be reached
 * here, so this double stands in for it. It serves the files of local model folders as repositories, the way the
 * hub answers them:
 *
 *   GET /api/models/{owner}/{name}/revision/{rev}[?blobs=true]   {id, sha, siblings: [{rfilename, size, blobId, lfs?}]}
 *   GET /api/models/{owner}/{name}/tree/{rev}                    [{type: 'file', path, size, oid, lfs?: {oid, size}}]
 *   HEAD|GET /{owner}/{name}/resolve/{rev}/{file}                 the file; LFS files (*.safetensors) answer 302 to
 *                                                                  the CDN, with X-Linked-Etag / X-Linked-Size; others
 *                                                                  with ETag "<blobId>"; all with X-Repo-Commit
 *   GET http://localhost:{port}/cdn/{sha256}                       the LFS file, from a second server on another host
 *                                                                  name, as the hub's CDN is (signed URLs: no token)
 *
 * Files honour Range (206, Content-Range). Every request is recorded (method, path, headers, bytes sent). A test
 * can require a token of the hub (401 without it), cut the first transfer of a file after some bytes (an
 * interrupted download), or corrupt a file's bytes.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';

export interface HubDoubleRepo {
  /** `owner/name`. */
  id: string;
  /** The folder whose files are the repository's. */
  dir: string;
  /** The commit `main` points at. Default a fixed hash. */
  sha?: string;
}

export interface HubDoubleOptions {
  /** Bearer token every request must carry (401 otherwise). Default none required. */
  token?: string;
  /** Closes the connection of the first transfer of `file` after `bytes` bytes of the body. */
  cut?: { file: string; bytes: number };
  /** Serves `file` with one byte changed (its listed sha256 stays the true one). */
  corrupt?: string;
}

export interface HubRequest {
  /** Which server answered: the hub or its CDN. */
  server: 'hub' | 'cdn';
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Body bytes sent in answer. */
  sent: number;
}

export interface HubDouble {
  /** Base URL, for HF_ENDPOINT. */
  url: string;
  /** Base URL of the CDN that LFS files are redirected to. */
  cdnUrl: string;
  requests: HubRequest[];
  close(): Promise<void>;
}

interface RepoFile {
  name: string;
  bytes: Buffer;
  blobId: string;
  sha256: string;
  lfs: boolean;
}

export const DOUBLE_COMMIT = '0123456789abcdef0123456789abcdef01234567';

/** The git blob id of `bytes`: the sha1 of `blob <size>\0` and the bytes. */
export function gitBlobId(bytes: Buffer): string {
  return createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex');
}

/** The hub keeps weights in LFS (and answers them from its CDN); small text files in git. */
export function isLfsFile(name: string): boolean {
  return name.endsWith('.safetensors');
}

function repoFiles(dir: string): RepoFile[] {
  return readdirSync(dir).filter((n) => statSync(path.join(dir, n)).isFile()).sort().map((name) => {
    const bytes = readFileSync(path.join(dir, name));
    return { name, bytes, blobId: gitBlobId(bytes), sha256: createHash('sha256').update(bytes).digest('hex'), lfs: isLfsFile(name) };
  });
}

export async function startHubDouble(repos: HubDoubleRepo[], opts: HubDoubleOptions = {}): Promise<HubDouble> {
  const byId = new Map(repos.map((r) => [r.id, { sha: r.sha ?? DOUBLE_COMMIT, files: repoFiles(r.dir) }]));
  const bySha256 = new Map<string, RepoFile>();
  for (const r of byId.values()) for (const f of r.files) bySha256.set(f.sha256, f);
  const requests: HubRequest[] = [];
  let cutDone = false;

  const record = (req: http.IncomingMessage, server: HubRequest['server']): HubRequest => {
    const rec: HubRequest = { server, method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, sent: 0 };
    requests.push(rec);
    return rec;
  };
  const cdn = http.createServer((req, res) => {
    const rec = record(req, 'cdn');
    const m = /^\/cdn\/([0-9a-f]{64})$/.exec(req.url ?? '');
    const file = m ? bySha256.get(m[1]) : undefined;
    if (!file) return void res.writeHead(404).end();
    send(req, res, rec, file, { etag: `"${file.sha256}"` });
  });
  await new Promise<void>((r) => cdn.listen(0, 'localhost', r));
  const cdnUrl = `http://localhost:${(cdn.address() as AddressInfo).port}`;

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const rec = record(req, 'hub');
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    if (opts.token !== undefined && req.headers.authorization !== `Bearer ${opts.token}`) {
      return json(401, { error: 'Invalid credentials in Authorization header' });
    }
    const api = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
    if (api) {
      const repo = byId.get(api[1]);
      if (!repo || (decodeURIComponent(api[2]) !== 'main' && api[2] !== repo.sha)) return json(404, { error: 'Repository not found' });
      const blobs = url.searchParams.get('blobs') === 'true';
      return json(200, {
        id: api[1], modelId: api[1], sha: repo.sha,
        siblings: repo.files.map((f) => ({
          rfilename: f.name,
          ...(blobs ? { size: f.bytes.length, blobId: f.blobId, ...(f.lfs ? { lfs: { sha256: f.sha256, size: f.bytes.length, pointerSize: 134 } } : {}) } : {}),
        })),
      });
    }
    const tree = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)$/.exec(url.pathname);
    if (tree) {
      const repo = byId.get(tree[1]);
      if (!repo || (decodeURIComponent(tree[2]) !== 'main' && tree[2] !== repo.sha)) return json(404, { error: 'Repository not found' });
      return json(200, repo.files.map((f) => ({
        type: 'file', path: f.name, size: f.bytes.length, oid: f.blobId,
        ...(f.lfs ? { lfs: { oid: f.sha256, size: f.bytes.length, pointerSize: 134 } } : {}),
      })));
    }
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    if (resolve) {
      const repo = byId.get(resolve[1]);
      const file = repo?.files.find((f) => f.name === decodeURIComponent(resolve[3]));
      if (!repo || !file || (resolve[2] !== 'main' && resolve[2] !== repo.sha)) return json(404, { error: 'Entry not found' });
      const common = { 'x-repo-commit': repo.sha };
      if (file.lfs) {
        res.writeHead(302, { ...common, location: `${cdnUrl}/cdn/${file.sha256}`, 'x-linked-etag': `"${file.sha256}"`, 'x-linked-size': String(file.bytes.length), etag: `"${file.blobId}"` });
        return res.end();
      }
      return send(req, res, rec, file, { ...common, etag: `"${file.blobId}"` });
    }
    json(404, { error: 'not found' });
  });

  function send(req: http.IncomingMessage, res: http.ServerResponse, rec: HubRequest, file: RepoFile, headers: Record<string, string>): void {
    let bytes = file.bytes;
    if (opts.corrupt === file.name) {
      bytes = Buffer.from(bytes);
      bytes[bytes.length >> 1] ^= 0xff;
    }
    const size = bytes.length;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const start = range ? Number(range[1]) : 0;
    if (start >= size && size > 0) {
      res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
      return;
    }
    const body = bytes.subarray(start);
    res.writeHead(range ? 206 : 200, {
      ...headers, 'accept-ranges': 'bytes', 'content-length': String(body.length), 'content-type': 'application/octet-stream',
      ...(range ? { 'content-range': `bytes ${start}-${size - 1}/${size}` } : {}),
    });
    if (req.method === 'HEAD') return void res.end();
    if (opts.cut?.file === file.name && !cutDone) {
      cutDone = true;
      const part = body.subarray(0, opts.cut.bytes);
      rec.sent = part.length;
      // The bytes written reach the client before the connection is torn down mid-body.
      res.write(part, () => res.socket?.destroy());
      return;
    }
    rec.sent = body.length;
    res.end(body);
  }

  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    cdnUrl,
    requests,
    close: async () => {
      for (const s of [server, cdn]) {
        s.closeAllConnections();
        await new Promise<void>((r) => s.close(() => r()));
      }
    },
  };
}
