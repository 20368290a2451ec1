/**
 * The one place a model reference becomes a folder: a local folder that exists is used as it is; a hub id
 * (`Qwen/Qwen3-4B`) is found in the Hugging Face cache (hub-cache.ts) and what it lacks is downloaded from the hub
 * through its plain HTTP API:
 *
 *   GET {HF_ENDPOINT}/api/models/{repo}/revision/{rev}?blobs=true   the commit, and each file's size, git blob id
 *                                                                    and, for LFS files, sha256
 *   GET {HF_ENDPOINT}/{repo}/resolve/{commit}/{file}                 the file (the hub redirects LFS files to its CDN)
 *
 * Only what the engine reads is fetched: config.json, generation_config.json, the tokenizer files and the
 * safetensors weights (model.safetensors, or the index and the shards it names). A file is written to
 * blobs/<etag>.incomplete, resumed from where an interrupted transfer stopped (HTTP Range), checked (sha256 for
 * LFS files, the git blob sha1 for the others) and renamed into place, then linked from snapshots/<commit>/ — the
 * layout huggingface_hub writes, so either client reuses the other's downloads.
 *
 * HF_TOKEN is sent as a bearer token; HF_HUB_OFFLINE=1 restricts resolution to the cache. The CLI and the
 * library (LocalBackend) both call resolveModel.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, symlink, truncate } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../util/atomic.js';
import { errorLine, McprlError } from '../util/errors.js';
import { FileLock } from '../util/file-lock.js';
import { cachedCommit, hubCacheDir, isCommit, isHubId, isPlainFileName, missingModelFiles, repoCacheDir, shardsOf, type HubEnv } from './hub-cache.js';

export type HubErrorCode =
  /** HF_HUB_OFFLINE=1 and the cache lacks the model or some of its files. */
  | 'HUB_OFFLINE_MISSING'
  /** The hub cannot be reached, and the cache has no complete copy. */
  | 'HUB_UNREACHABLE'
  /** No such model (or revision) on the hub, and no such local folder. */
  | 'HUB_NOT_FOUND'
  /** The hub refused: a private or gated model without a token that grants access. */
  | 'HUB_UNAUTHORIZED'
  /** The repository holds no config.json or no safetensors weights. */
  | 'HUB_NO_WEIGHTS'
  /** A downloaded file's sha256 (or git blob id, or size) is not the one the hub lists. */
  | 'HUB_CHECKSUM'
  /** Any other HTTP failure, or an answer that is not what the hub's API gives. */
  | 'HUB_HTTP';

/** Resolving or downloading a hub model failed; the message says what is missing and how to get it. */
export class HubError extends McprlError<HubErrorCode> {
  constructor(code: HubErrorCode, readonly repo: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** One file's transfer: bytes of `file` done out of `total` (0 when the hub gave no size). */
export interface DownloadProgress {
  repo: string;
  file: string;
  done: number;
  total: number;
}

export interface ResolveModelOptions {
  /** Where HF_HOME, HF_HUB_CACHE, HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE are read. Default process.env. */
  env?: HubEnv;
  /** Branch, tag or commit of a hub model. Default `main`. */
  revision?: string;
  /** Called as files download: when one starts, every few MiB, and when it is complete. */
  onProgress?: (p: DownloadProgress) => void;
}

export const DEFAULT_HF_ENDPOINT = 'https://huggingface.co';
const DEFAULT_REVISION = 'main';

/** The files of a repository besides the weights that a model folder may need. */
const MODEL_FILES = new Set([
  'config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json',
  'added_tokens.json', 'vocab.json', 'merges.txt', 'chat_template.jinja', 'model.safetensors.index.json',
]);

/** How often a transfer reports its progress, in bytes. */
const PROGRESS_EVERY_BYTES = 8 * 2 ** 20;

/** How long a process waits for another that downloads the same file into the same cache. */
const DOWNLOAD_LOCK_WAIT_MS = 60 * 60_000;

/** The revision API's answer, as far as it is read (`?blobs=true` adds size, blobId and lfs to each sibling). */
const RevisionInfoSchema = z.object({
  sha: z.string().regex(/^[0-9a-f]{40}$/),
  siblings: z.array(z.object({
    rfilename: z.string(),
    size: z.number().int().nonnegative().optional(),
    blobId: z.string().regex(/^[0-9a-f]{40}$/).optional(),
    lfs: z.object({ sha256: z.string().regex(/^[0-9a-f]{64}$/), size: z.number().int().nonnegative() }).optional(),
  })),
});
type Sibling = z.infer<typeof RevisionInfoSchema>['siblings'][number];

/** A local folder when `ref` names one that exists (it wins), else a hub id's snapshot folder, downloading what it lacks. */
export async function resolveModel(ref: string, opts: ResolveModelOptions = {}): Promise<string> {
  if (existsSync(ref) || !isHubId(ref)) return path.resolve(ref);
  const env = opts.env ?? process.env;
  const revision = opts.revision ?? DEFAULT_REVISION;
  const hub = new HubRepo(ref, revision, env, opts.onProgress);
  if (isOffline(env)) return hub.fromCache('HUB_OFFLINE_MISSING', 'HF_HUB_OFFLINE is set, so nothing is downloaded');
  let info: z.infer<typeof RevisionInfoSchema>;
  try {
    info = await hub.revisionInfo();
  } catch (err) {
    // As huggingface_hub: a hub out of reach is no failure when the cache already holds the model.
    if (err instanceof HubError && err.code === 'HUB_UNREACHABLE') return hub.fromCache('HUB_UNREACHABLE', hub.unreachable(hub.revisionWhat, err.cause));
    throw err;
  }
  return hub.download(info);
}

/** HF_HUB_OFFLINE as huggingface_hub reads it: 1, true, yes or on (any case). */
function isOffline(env: HubEnv): boolean {
  return /^(1|true|yes|on)$/i.test(env.HF_HUB_OFFLINE ?? '');
}

class HubRepo {
  readonly endpoint: string;
  readonly dir: string;
  private readonly token: string | undefined;

  constructor(readonly repo: string, readonly revision: string, readonly env: HubEnv, private readonly onProgress?: (p: DownloadProgress) => void) {
    this.endpoint = (env.HF_ENDPOINT || DEFAULT_HF_ENDPOINT).replace(/\/+$/, '');
    this.dir = repoCacheDir(repo, env);
    this.token = env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN || undefined;
  }

  /** The cached snapshot of the revision when complete; else a HubError saying what is missing and how to get it. */
  fromCache(code: 'HUB_OFFLINE_MISSING' | 'HUB_UNREACHABLE', why: string): string {
    const commit = cachedCommit(this.dir, this.revision);
    const snapshot = commit ? path.join(this.dir, 'snapshots', commit) : null;
    const missing = snapshot === null || !existsSync(snapshot) ? null : missingModelFiles(snapshot);
    if (snapshot !== null && missing !== null && missing.length === 0) return snapshot;
    const have = missing === null
      ? `the Hugging Face cache (${hubCacheDir(this.env)}) has no snapshot of ${this.repo} at ${this.revision}`
      : `its cached snapshot ${snapshot} lacks ${missing.join(', ')}`;
    throw new HubError(code, this.repo,
      `model ${this.repo}: no local folder of that name, ${have}, and ${why}. To get the weights: ` +
      `${code === 'HUB_OFFLINE_MISSING' ? 'unset HF_HUB_OFFLINE where the hub can be reached, or ' : ''}` +
      `run \`hf download ${this.repo}\` on a machine that reaches the hub and copy its cache here (HF_HUB_CACHE or HF_HOME), ` +
      'or give the path of a local model folder');
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.token ? { authorization: `Bearer ${this.token}` } : {}), ...extra };
  }

  /** Why `what` could not be had from the hub, from fetch's error (whose cause is the system's: ENOTFOUND, ECONNREFUSED…). */
  unreachable(what: string, err: unknown): string {
    const cause = (err as { cause?: unknown } | undefined)?.cause;
    return `cannot reach ${this.endpoint} for ${what} (${errorLine(cause ?? err)})`;
  }

  get revisionWhat(): string {
    return `revision ${this.revision} of ${this.repo}`;
  }

  /** GET with the token; a transport failure becomes HUB_UNREACHABLE, a refusal the HubError saying why. */
  private async get(url: string, what: string, headers: Record<string, string> = {}): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(url, { headers: this.headers(headers), redirect: 'follow' });
    } catch (err) {
      throw new HubError('HUB_UNREACHABLE', this.repo, `model ${this.repo}: ${this.unreachable(what, err)}`, { cause: err });
    }
    if (res.ok || res.status === 416) return res;
    await res.body?.cancel();
    if (res.status === 401 || res.status === 403) {
      throw new HubError('HUB_UNAUTHORIZED', this.repo, this.token
        ? `model ${this.repo}: ${this.endpoint} refused HF_TOKEN for ${what} (HTTP ${res.status}): a gated model needs its terms accepted at ${this.endpoint}/${this.repo} with the token's account, and the token needs read access`
        : `model ${this.repo}: no local folder of that name, and ${this.endpoint} refused ${what} without a token (HTTP ${res.status}): the model is private or gated, or not there; set HF_TOKEN to a token that can read it, or give the path of a local model folder`);
    }
    if (res.status === 404) {
      throw new HubError('HUB_NOT_FOUND', this.repo, `model ${this.repo}: no local folder of that name, and ${this.endpoint} has no ${what} (HTTP 404)`);
    }
    throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: ${this.endpoint} answered HTTP ${res.status} for ${what}`);
  }

  async revisionInfo(): Promise<z.infer<typeof RevisionInfoSchema>> {
    const url = `${this.endpoint}/api/models/${this.repo}/revision/${encodeURIComponent(this.revision)}?blobs=true`;
    const res = await this.get(url, this.revisionWhat);
    let body: unknown;
    try {
      body = await res.json();
    } catch (err) {
      throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: ${url} did not answer JSON (${errorLine(err)})`, { cause: err });
    }
    const info = RevisionInfoSchema.safeParse(body);
    if (!info.success) {
      const issue = info.error.issues[0];
      throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: ${url} answered ${issue.path.join('.') || 'a body'} that is not the hub's (${issue.message})`);
    }
    return info.data;
  }

  /** Fetches the model's files that the snapshot lacks, then records the revision's commit in refs/. */
  async download(info: z.infer<typeof RevisionInfoSchema>): Promise<string> {
    const snapshot = path.join(this.dir, 'snapshots', info.sha);
    const files = new Map(info.siblings.filter((s) => isPlainFileName(s.rfilename)).map((s) => [s.rfilename, s]));
    const where = `${this.repo} at ${this.revision} (${info.sha})`;
    if (!files.has('config.json')) throw new HubError('HUB_NO_WEIGHTS', this.repo, `model ${where} has no config.json: it is not a model mcprl can load`);
    for (const [name, s] of files) if (MODEL_FILES.has(name)) await this.fetchFile(info.sha, s);
    let weights: string[];
    if (files.has('model.safetensors.index.json')) {
      const indexFile = path.join(snapshot, 'model.safetensors.index.json');
      try {
        weights = shardsOf(JSON.parse(await readFile(indexFile, 'utf8')));
      } catch (err) {
        throw new HubError('HUB_NO_WEIGHTS', this.repo, `model ${where}: ${indexFile}: ${errorLine(err)}`, { cause: err });
      }
    } else {
      weights = ['model.safetensors'];
    }
    const absent = weights.filter((w) => !files.has(w));
    if (absent.length > 0) {
      throw new HubError('HUB_NO_WEIGHTS', this.repo, `model ${where} has no ${absent.join(', ')}: mcprl reads safetensors weights only (model.safetensors, or model.safetensors.index.json and its shards)`);
    }
    for (const w of weights) await this.fetchFile(info.sha, files.get(w)!);
    if (!isCommit(this.revision)) await writeFileAtomic(path.join(this.dir, 'refs', this.revision), info.sha);
    return snapshot;
  }

  /** Links snapshots/<commit>/<file> to its blob, downloading the blob first when the cache lacks it. */
  private async fetchFile(commit: string, s: Sibling): Promise<void> {
    const link = path.join(this.dir, 'snapshots', commit, s.rfilename);
    if (existsSync(link)) return;
    const etag = s.lfs?.sha256 ?? s.blobId;
    if (etag === undefined) throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: the hub listed ${s.rfilename} without its blob id`);
    const blob = path.join(this.dir, 'blobs', etag);
    if (!existsSync(blob)) {
      // Two processes fetching the same model share the blob: one downloads it while the other waits.
      const lockFile = path.join(hubCacheDir(this.env), '.locks', path.basename(this.dir), `${etag}.mcprl-lock`);
      await mkdir(path.dirname(lockFile), { recursive: true });
      const lock = await FileLock.acquire(lockFile, Infinity, { waitMs: DOWNLOAD_LOCK_WAIT_MS, pollMs: 1000 });
      if (!(lock instanceof FileLock)) {
        throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: ${s.rfilename} is being downloaded into ${blob} by pid ${lock.holder.pid}, which has not finished within an hour`);
      }
      try {
        if (!existsSync(blob)) await this.fetchBlob(commit, s, blob);
      } finally {
        lock.release();
      }
    }
    // Made beside and renamed over: two resolutions of one model at once both end with the same link in place.
    await mkdir(path.dirname(link), { recursive: true });
    const tmp = `${link}.${process.pid}-${randomBytes(4).toString('hex')}.link`;
    await symlink(path.relative(path.dirname(link), blob), tmp);
    await rename(tmp, link);
  }

  /** Downloads one file into `blob`, resuming a partial `<blob>.incomplete`, and checks it before renaming it into place. */
  private async fetchBlob(commit: string, s: Sibling, blob: string): Promise<void> {
    const part = `${blob}.incomplete`;
    const size = s.lfs?.size ?? s.size;
    const check = s.lfs ? { algorithm: 'sha256', expected: s.lfs.sha256 } : s.blobId !== undefined && size !== undefined ? { algorithm: 'git blob sha1', expected: s.blobId } : null;
    const newHash = (): Hash => {
      if (s.lfs) return createHash('sha256');
      // A git blob id is the sha1 of `blob <size>\0` and the content.
      return createHash('sha1').update(`blob ${size}\0`);
    };
    await mkdir(path.dirname(blob), { recursive: true });
    let have = existsSync(part) ? statSync(part).size : 0;
    if (size !== undefined && have > size) {
      await truncate(part, 0);
      have = 0;
    }
    const url = `${this.endpoint}/${this.repo}/resolve/${commit}/${s.rfilename.split('/').map(encodeURIComponent).join('/')}`;
    const what = `${s.rfilename} of ${this.repo}`;
    const res = await this.get(url, what, have > 0 ? { range: `bytes=${have}-` } : {});
    // 206: the rest of the file; 200: the whole file (a server that ignores Range); 416: nothing left to send.
    if (res.status === 416) {
      await res.body?.cancel();
      if (size === undefined || have !== size) {
        await truncate(part, 0);
        throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: ${url} refused the range bytes=${have}- (HTTP 416); the partial file was cleared, try again`);
      }
    } else if (res.status === 206) {
      const start = /^bytes (\d+)-/.exec(res.headers.get('content-range') ?? '')?.[1];
      if (start === undefined || Number(start) !== have) {
        await res.body?.cancel();
        throw new HubError('HUB_HTTP', this.repo, `model ${this.repo}: ${url} sent a range starting at ${start ?? '(no Content-Range)'}, not at byte ${have}`);
      }
    } else {
      have = 0;
    }
    const hash = newHash();
    if (have > 0) for await (const chunk of createReadStream(part)) hash.update(chunk as Buffer);
    const total = size ?? (have + Number(res.headers.get('content-length') ?? 0));
    const report = (done: number) => this.onProgress?.({ repo: this.repo, file: s.rfilename, done, total });
    let done = have;
    report(done);
    if (res.status !== 416 && res.body) {
      const out = await open(part, have > 0 ? 'a' : 'w');
      let reported = done;
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          await out.write(chunk);
          hash.update(chunk);
          done += chunk.byteLength;
          // Every few MiB; the last report comes once the file is checked and in place.
          if (done - reported >= PROGRESS_EVERY_BYTES && (size === undefined || done < size)) report((reported = done));
        }
      } catch (err) {
        // What arrived stays in the partial file: the next attempt resumes from there.
        throw new HubError('HUB_UNREACHABLE', this.repo, `model ${this.repo}: the transfer of ${s.rfilename} broke off at byte ${done} (${errorLine((err as { cause?: unknown }).cause ?? err)}); run again to resume it`, { cause: err });
      } finally {
        await out.close();
      }
    }
    if (size !== undefined && done !== size) {
      throw new HubError('HUB_UNREACHABLE', this.repo, `model ${this.repo}: the transfer of ${s.rfilename} ended at byte ${done} of ${size}; run again to resume it`);
    }
    if (check) {
      const got = hash.digest('hex');
      if (got !== check.expected) {
        // A corrupt file is never resumed: the next attempt starts afresh.
        await rm(part, { force: true });
        throw new HubError('HUB_CHECKSUM', this.repo, `model ${this.repo}: ${s.rfilename} downloaded from ${url} has ${check.algorithm} ${got}, not ${check.expected} as the hub lists; the file was discarded, run again to download it afresh`);
      }
    }
    await rename(part, blob);
    report(done);
  }
}

