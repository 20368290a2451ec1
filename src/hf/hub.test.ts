import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readlinkSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DOUBLE_COMMIT, gitBlobId, isLfsFile, startHubDouble, type HubDouble } from '../../test/doubles/hub-double.js';
import { readModelConfig } from './config.js';
import { hubCacheDir, isHubId, isSnapshotOf, repoCacheDir } from './hub-cache.js';
import { HubError, resolveModel, type DownloadProgress } from './hub.js';

const TINY = path.resolve('fixtures/models/tiny-bookshop');
const REPO = 'mcprl-test/tiny-bookshop';
// The files the resolver fetches from a repository (the tiny model's build notes and warm-up set are not model files).
const MODEL_FILES = ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'];

let work: string;
let cache: string;
beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-hub-'));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});
let n = 0;
let hub: HubDouble | undefined;
afterEach(async () => {
  await hub?.close();
  hub = undefined;
});
async function freshCache(): Promise<string> {
  cache = path.join(work, `cache-${n++}`);
  await mkdir(cache);
  return cache;
}
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/**
 * Lays `files` of `src` into `cacheDir` as huggingface_hub's snapshot_download does: each file once in blobs/,
 * named by its sha256 when it is an LFS file and by its git blob id otherwise; snapshots/<commit>/ holds relative
 * symlinks to them; refs/main names the commit.
 */
async function layHubCache(cacheDir: string, repo: string, src: string, files: string[], commit = DOUBLE_COMMIT): Promise<string> {
  const repoDir = path.join(cacheDir, `models--${repo.replace('/', '--')}`);
  const snapshot = path.join(repoDir, 'snapshots', commit);
  await mkdir(path.join(repoDir, 'blobs'), { recursive: true });
  await mkdir(path.join(repoDir, 'refs'), { recursive: true });
  await mkdir(snapshot, { recursive: true });
  for (const f of files) {
    const bytes = await readFile(path.join(src, f));
    const etag = isLfsFile(f) ? sha256(bytes) : gitBlobId(bytes);
    await writeFile(path.join(repoDir, 'blobs', etag), bytes);
    await symlink(`../../blobs/${etag}`, path.join(snapshot, f));
  }
  await writeFile(path.join(repoDir, 'refs', 'main'), commit);
  return snapshot;
}

/** The environment of one test: its own cache, the double as the hub. */
const envOf = (extra: Record<string, string> = {}) => ({ HF_HUB_CACHE: cache, ...(hub ? { HF_ENDPOINT: hub.url } : {}), ...extra });

/** A loopback port nothing listens on: the hub out of reach. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function expectSameFiles(dir: string, files: string[]): Promise<void> {
  for (const f of files) expect(sha256(await readFile(path.join(dir, f))), f).toBe(sha256(await readFile(path.join(TINY, f))));
}

describe('hub ids and the cache folder', () => {
  it('tells hub ids from paths', () => {
    for (const id of ['Qwen/Qwen3-4B', 'meta-llama/Llama-3.2-1B-Instruct', 'a/b.c_d']) expect(isHubId(id), id).toBe(true);
    for (const p of ['/models/qwen3', './Qwen/Qwen3-4B', '../a/b', 'qwen3', 'a/b/c', 'a--b/c', 'a/b..c', 'C:\\models\\q', '']) expect(isHubId(p), p).toBe(false);
  });

  it('finds the cache where huggingface_hub does: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub', () => {
    expect(hubCacheDir({ HF_HUB_CACHE: '/c/hub', HF_HOME: '/h' })).toBe('/c/hub');
    expect(hubCacheDir({ HF_HOME: '/h' })).toBe('/h/hub');
    expect(hubCacheDir({ XDG_CACHE_HOME: '/x' })).toBe('/x/huggingface/hub');
    expect(hubCacheDir({})).toMatch(/\/\.cache\/huggingface\/hub$/);
    expect(repoCacheDir('Qwen/Qwen3-4B', { HF_HOME: '/h' })).toBe('/h/hub/models--Qwen--Qwen3-4B');
  });

  it('knows a snapshot folder of a hub id (a resumed run pinned to a revision names the same model)', () => {
    const env = { HF_HUB_CACHE: '/c' };
    expect(isSnapshotOf('Qwen/Qwen3-4B', `/c/models--Qwen--Qwen3-4B/snapshots/${DOUBLE_COMMIT}`, env)).toBe(true);
    expect(isSnapshotOf('Qwen/Qwen3-8B', `/c/models--Qwen--Qwen3-4B/snapshots/${DOUBLE_COMMIT}`, env)).toBe(false);
    expect(isSnapshotOf('Qwen/Qwen3-4B', '/c/models--Qwen--Qwen3-4B/blobs', env)).toBe(false);
    expect(isSnapshotOf('/models/qwen3', '/models/qwen3', env)).toBe(false);
  });

  it('a local folder that exists wins over the hub id it spells', async () => {
    // fixtures/models reads as owner/name; offline with an empty cache, only the folder can answer.
    await freshCache();
    expect(await resolveModel('fixtures/models', { env: envOf({ HF_HUB_OFFLINE: '1' }) })).toBe(path.resolve('fixtures/models'));
    expect(await resolveModel(TINY, { env: envOf({ HF_HUB_OFFLINE: '1' }) })).toBe(TINY);
  });

  it('resolves a model from a cache laid out as huggingface_hub lays it out, offline, and the folder loads', async () => {
    await freshCache();
    const snapshot = await layHubCache(cache, REPO, TINY, MODEL_FILES);
    const dir = await resolveModel(REPO, { env: envOf({ HF_HUB_OFFLINE: '1' }) });
    expect(dir).toBe(snapshot);
    expect((await readModelConfig(dir)).spec.modelType).toBe('qwen3');
    expect(JSON.parse(await readFile(path.join(dir, 'tokenizer.json'), 'utf8')).model.type).toBe('BPE');
  });

  it('HF_HOME locates the cache at HF_HOME/hub', async () => {
    const home = path.join(work, `home-${n++}`);
    cache = path.join(home, 'hub');
    const snapshot = await layHubCache(cache, REPO, TINY, MODEL_FILES);
    expect(await resolveModel(REPO, { env: { HF_HOME: home, HF_HUB_OFFLINE: '1' } })).toBe(snapshot);
  });

  it('HF_HUB_OFFLINE: a model not cached, or cached without its weights, is an error naming the repo and what is missing', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }]);
    await freshCache();
    const none = await resolveModel(REPO, { env: envOf({ HF_HUB_OFFLINE: '1' }) }).catch((e: unknown) => e);
    expect(none).toBeInstanceOf(HubError);
    expect(none).toMatchObject({ code: 'HUB_OFFLINE_MISSING', repo: REPO });
    expect((none as Error).message).toContain(`model ${REPO}: no local folder of that name, the Hugging Face cache (${cache}) has no snapshot of ${REPO} at main`);
    expect((none as Error).message).toContain(`hf download ${REPO}`);
    expect((none as Error).message).not.toMatch(/\n/);

    await layHubCache(cache, REPO, TINY, MODEL_FILES.filter((f) => f !== 'model.safetensors'));
    const partial = await resolveModel(REPO, { env: envOf({ HF_HUB_OFFLINE: '1' }) }).catch((e: unknown) => e);
    expect(partial).toMatchObject({ code: 'HUB_OFFLINE_MISSING' });
    expect((partial as Error).message).toContain(`lacks model.safetensors (or model.safetensors.index.json and its shards)`);
    // Offline means offline: the hub was never asked.
    expect(hub.requests).toEqual([]);
  });

  it('a hub out of reach: the cached model serves, and without one the error says how to get the weights', async () => {
    await freshCache();
    const endpoint = `http://127.0.0.1:${await closedPort()}`;
    const err = await resolveModel(REPO, { env: envOf({ HF_ENDPOINT: endpoint }) }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'HUB_UNREACHABLE', repo: REPO });
    expect((err as Error).message).toMatch(new RegExp(`cannot reach ${endpoint} .*ECONNREFUSED.*hf download ${REPO}`));
    const snapshot = await layHubCache(cache, REPO, TINY, MODEL_FILES);
    expect(await resolveModel(REPO, { env: envOf({ HF_ENDPOINT: endpoint }) })).toBe(snapshot);
  });
});

describe('downloads from a hub (a local test double of its file API)', () => {
  it('downloads what a model needs into the hub cache layout, with progress, and reuses it afterwards', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }]);
    await freshCache();
    const progress: DownloadProgress[] = [];
    const dir = await resolveModel(REPO, { env: envOf(), onProgress: (p) => progress.push(p) });
    const repoDir = repoCacheDir(REPO, envOf());
    expect(dir).toBe(path.join(repoDir, 'snapshots', DOUBLE_COMMIT));
    expect((await readdir(dir)).sort()).toEqual(MODEL_FILES);
    await expectSameFiles(dir, MODEL_FILES);
    expect(await readFile(path.join(repoDir, 'refs', 'main'), 'utf8')).toBe(DOUBLE_COMMIT);
    // Relative symlinks into blobs/, named by sha256 (LFS) or git blob id, as huggingface_hub writes them.
    for (const f of MODEL_FILES) {
      const bytes = await readFile(path.join(TINY, f));
      const etag = isLfsFile(f) ? sha256(bytes) : gitBlobId(bytes);
      expect(lstatSync(path.join(dir, f)).isSymbolicLink(), f).toBe(true);
      expect(readlinkSync(path.join(dir, f)), f).toBe(`../../blobs/${etag}`);
    }
    expect((await readdir(path.join(repoDir, 'blobs'))).some((b) => b.endsWith('.incomplete'))).toBe(false);
    // Each file reports its start and its completion, with the size the hub lists.
    const size = (await readFile(path.join(TINY, 'model.safetensors'))).length;
    const weights = progress.filter((p) => p.file === 'model.safetensors');
    expect(weights[0]).toEqual({ repo: REPO, file: 'model.safetensors', done: 0, total: size });
    expect(weights.at(-1)).toEqual({ repo: REPO, file: 'model.safetensors', done: size, total: size });
    expect(new Set(progress.map((p) => p.file))).toEqual(new Set(MODEL_FILES));
    // The weights came through the CDN redirect, as the hub serves LFS files.
    expect(hub.requests.some((r) => r.path.startsWith('/cdn/'))).toBe(true);
    expect((await readModelConfig(dir)).spec.modelType).toBe('qwen3');

    // Resolved again: the revision is looked up, nothing is downloaded.
    const before = hub.requests.length;
    expect(await resolveModel(REPO, { env: envOf() })).toBe(dir);
    expect(hub.requests.slice(before).map((r) => r.path)).toEqual([`/api/models/${REPO}/revision/main?blobs=true`]);
    // And offline, the downloaded snapshot is the model.
    expect(await resolveModel(REPO, { env: envOf({ HF_HUB_OFFLINE: '1' }) })).toBe(dir);
  });

  it('two resolutions of one model at once download each file once and end with the same folder', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }]);
    await freshCache();
    const [a, b] = await Promise.all([resolveModel(REPO, { env: envOf() }), resolveModel(REPO, { env: envOf() })]);
    expect(a).toBe(b);
    await expectSameFiles(a, MODEL_FILES);
    expect(hub.requests.filter((r) => r.server === 'cdn')).toHaveLength(1);
    expect((await readdir(a)).sort()).toEqual(MODEL_FILES);
  });

  it('resumes a partial file left by an interrupted transfer with an HTTP Range request', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }]);
    await freshCache();
    const weights = await readFile(path.join(TINY, 'model.safetensors'));
    const blobs = path.join(repoCacheDir(REPO, envOf()), 'blobs');
    await mkdir(blobs, { recursive: true });
    const have = 1_000_000;
    await writeFile(path.join(blobs, `${sha256(weights)}.incomplete`), weights.subarray(0, have));
    const dir = await resolveModel(REPO, { env: envOf() });
    const cdn = hub.requests.filter((r) => r.path.startsWith('/cdn/'));
    expect(cdn).toHaveLength(1);
    expect(cdn[0].headers.range).toBe(`bytes=${have}-`);
    expect(cdn[0].sent).toBe(weights.length - have);
    await expectSameFiles(dir, MODEL_FILES);
  });

  it('a transfer cut off mid-file fails, and the next resolve completes it from where it stopped', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }], { cut: { file: 'model.safetensors', bytes: 1_500_000 } });
    await freshCache();
    const first = await resolveModel(REPO, { env: envOf() }).catch((e: unknown) => e);
    expect(first).toMatchObject({ code: 'HUB_UNREACHABLE' });
    expect((first as Error).message).toContain('run again to resume it');
    const weights = await readFile(path.join(TINY, 'model.safetensors'));
    const part = path.join(repoCacheDir(REPO, envOf()), 'blobs', `${sha256(weights)}.incomplete`);
    const kept = (await readFile(part)).length;
    expect(kept).toBeLessThanOrEqual(1_500_000);
    const before = hub.requests.length;
    const dir = await resolveModel(REPO, { env: envOf() });
    const resumed = hub.requests.slice(before).filter((r) => r.path.startsWith('/cdn/'));
    expect(resumed).toHaveLength(1);
    expect(resumed[0].headers.range).toBe(kept > 0 ? `bytes=${kept}-` : undefined);
    expect(resumed[0].sent).toBe(weights.length - kept);
    await expectSameFiles(dir, MODEL_FILES);
  });

  it('a file whose bytes do not match the sha256 the hub lists is caught, discarded and not linked', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }], { corrupt: 'model.safetensors' });
    await freshCache();
    const err = await resolveModel(REPO, { env: envOf() }).catch((e: unknown) => e);
    const weights = await readFile(path.join(TINY, 'model.safetensors'));
    expect(err).toMatchObject({ code: 'HUB_CHECKSUM', repo: REPO });
    expect((err as Error).message).toContain(`model.safetensors downloaded from ${hub.url}/${REPO}/resolve/${DOUBLE_COMMIT}/model.safetensors has sha256`);
    expect((err as Error).message).toContain(`not ${sha256(weights)} as the hub lists`);
    const repoDir = repoCacheDir(REPO, envOf());
    expect(await readdir(path.join(repoDir, 'blobs'))).not.toContain(sha256(weights));
    expect(await readdir(path.join(repoDir, 'blobs'))).not.toContain(`${sha256(weights)}.incomplete`);
    expect(existsSync(path.join(repoDir, 'snapshots', DOUBLE_COMMIT, 'model.safetensors'))).toBe(false);
    expect(existsSync(path.join(repoDir, 'refs', 'main'))).toBe(false);
  });

  it('a small file that differs from its git blob id is caught too', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }], { corrupt: 'tokenizer.json' });
    await freshCache();
    const err = await resolveModel(REPO, { env: envOf() }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'HUB_CHECKSUM' });
    expect((err as Error).message).toMatch(/tokenizer\.json downloaded from .* has git blob sha1 [0-9a-f]{40}, not [0-9a-f]{40}/);
  });

  it('sends HF_TOKEN as a bearer token on every request to the hub; without it a gated model is refused, saying so', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }], { token: 'hf_secret' });
    await freshCache();
    const refused = await resolveModel(REPO, { env: envOf() }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'HUB_UNAUTHORIZED' });
    expect((refused as Error).message).toContain('set HF_TOKEN');
    const wrong = await resolveModel(REPO, { env: envOf({ HF_TOKEN: 'hf_wrong' }) }).catch((e: unknown) => e);
    expect((wrong as Error).message).toContain('refused HF_TOKEN');
    hub.requests.length = 0;
    const dir = await resolveModel(REPO, { env: envOf({ HF_TOKEN: 'hf_secret' }) });
    await expectSameFiles(dir, MODEL_FILES);
    const [toHub, toCdn] = [hub.requests.filter((r) => r.server === 'hub'), hub.requests.filter((r) => r.server === 'cdn')];
    expect(toHub.length).toBe(MODEL_FILES.length + 1);
    for (const r of toHub) expect(r.headers.authorization, r.path).toBe('Bearer hf_secret');
    // The token stays with the hub: the CDN's URLs are signed, and a redirect to another host drops it.
    expect(toCdn.length).toBe(1);
    expect(toCdn[0].headers.authorization).toBeUndefined();
  });

  it('a model the hub does not have is named in the error', async () => {
    hub = await startHubDouble([{ id: REPO, dir: TINY }]);
    await freshCache();
    const err = await resolveModel('mcprl-test/nothing', { env: envOf() }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'HUB_NOT_FOUND', repo: 'mcprl-test/nothing' });
    expect((err as Error).message).toBe(`model mcprl-test/nothing: no local folder of that name, and ${hub.url} has no revision main of mcprl-test/nothing (HTTP 404)`);
  });
});
