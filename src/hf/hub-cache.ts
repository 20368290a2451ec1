/**
 * The Hugging Face hub cache, laid out as the hub's own client (huggingface_hub) lays it out, so that a model
 * downloaded by either is found by the other:
 *
 *   $HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME default ~/.cache/huggingface)
 *     models--Qwen--Qwen3-4B/
 *       refs/main                      the commit `main` pointed at when last resolved
 *       blobs/<etag>                   each file once: LFS files named by their sha256, others by their git blob sha1
 *       snapshots/<commit>/<file>      relative symlinks into blobs/
 *
 * This file knows the layout and what a usable model folder holds; hub.ts fetches what is missing.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

/** The environment variables read here and in hub.ts (process.env by default). */
export type HubEnv = Readonly<Record<string, string | undefined>>;

/** The cache folder: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub. */
export function hubCacheDir(env: HubEnv = process.env): string {
  const hub = env.HF_HUB_CACHE || env.HUGGINGFACE_HUB_CACHE;
  if (hub) return path.resolve(expandHome(hub));
  const home = env.HF_HOME ? expandHome(env.HF_HOME) : path.join(env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'huggingface');
  return path.resolve(home, 'hub');
}

function expandHome(p: string): string {
  return p === '~' || p.startsWith('~/') ? path.join(homedir(), p.slice(1)) : p;
}

/**
 * A model repository id as the hub spells it: `owner/name`, each part letters, digits, `-`, `_`, `.` (no `--` or
 * `..`, at most 96 characters), as huggingface_hub's validate_repo_id. A bare name is not taken for one: it is
 * a local folder's name far more often than a legacy hub model's.
 */
export function isHubId(ref: string): boolean {
  return ref.length <= 96 && /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/.test(ref) && !ref.includes('--') && !ref.includes('..');
}

/** `models--owner--name` under the cache. */
export function repoCacheDir(repo: string, env: HubEnv = process.env): string {
  return path.join(hubCacheDir(env), `models--${repo.split('/').join('--')}`);
}

/** A full commit hash, which names a snapshot itself rather than through refs/. */
export function isCommit(revision: string): boolean {
  return /^[0-9a-f]{40}$/.test(revision);
}

/** The commit a revision points at in the cache (refs/<revision>), or null when it was never resolved here. */
export function cachedCommit(repoDir: string, revision: string): string | null {
  if (isCommit(revision)) return revision;
  try {
    const commit = readFileSync(path.join(repoDir, 'refs', revision), 'utf8').trim();
    return isCommit(commit) ? commit : null;
  } catch {
    return null;
  }
}

/**
 * What a model folder lacks for mcprl to load it: config.json, tokenizer.json and the weights (model.safetensors,
 * or the index and every shard it names). A dangling symlink counts as missing. Empty when the folder is usable.
 */
export function missingModelFiles(dir: string): string[] {
  const missing = ['config.json', 'tokenizer.json'].filter((f) => !existsSync(path.join(dir, f)));
  const index = path.join(dir, 'model.safetensors.index.json');
  if (existsSync(index)) {
    let shards: string[];
    try {
      shards = shardsOf(JSON.parse(readFileSync(index, 'utf8')));
    } catch {
      return [...missing, 'model.safetensors.index.json (unreadable)'];
    }
    missing.push(...shards.filter((f) => !existsSync(path.join(dir, f))));
  } else if (!existsSync(path.join(dir, 'model.safetensors'))) {
    missing.push('model.safetensors (or model.safetensors.index.json and its shards)');
  }
  return missing;
}

/** The shard files `model.safetensors.index.json` names (its weight_map's values), each once, in order. */
export function shardsOf(index: unknown): string[] {
  const map = (index as { weight_map?: unknown } | null)?.weight_map;
  if (!map || typeof map !== 'object') throw new Error('weight_map is missing');
  const files = Object.values(map as Record<string, unknown>);
  const bad = files.find((f) => typeof f !== 'string' || !isPlainFileName(f));
  if (bad !== undefined) throw new Error(`weight_map names ${JSON.stringify(bad)}, not a file of the model's own folder`);
  return [...new Set(files as string[])].sort();
}

/** A name of a file directly in the folder (no separators, not `.` or `..`): what a repo's file names must be here. */
export function isPlainFileName(name: string): boolean {
  return /^[\w.-]+$/.test(name) && name !== '.' && name !== '..';
}

/** True when `dir` is a cached snapshot of the hub id `ref` (any revision): a run pinned to it names the same model. */
export function isSnapshotOf(ref: string, dir: string, env: HubEnv = process.env): boolean {
  return isHubId(ref) && !existsSync(ref) && path.dirname(path.resolve(dir)) === path.join(repoCacheDir(ref, env), 'snapshots');
}
