/**
 * Models named by hub id where users name them: `--model` on the CLI and TrainableModel's baseModel on a
 * LocalBackend. The hub cannot be reached here: a local test double of its file API (test/doubles/hub-double.ts)
 * serves the bundled tiny model as a repository.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { LocalBackend } from '../src/backend/local-backend.js';
import { TrainableModel } from '../src/backend/trainable-model.js';
import { repoCacheDir } from '../src/hf/hub-cache.js';
import { loadScenarioSet, writeScenarioSet } from '../src/scenarios/scenario.js';
import { DOUBLE_COMMIT, startHubDouble, type HubDouble } from './doubles/hub-double.js';
import { exited, listeningUrl, runCli } from './helpers/cli.js';
import { FIXTURE_SERVER_MAIN, REPO_ROOT } from './helpers/servers.js';

const TINY = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const REPO = 'mcprl-test/tiny-bookshop';
const ENTRY = path.join(REPO_ROOT, 'src', 'cli', 'entry.ts');

let work: string;
let hub: HubDouble;
beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-hub-models-'));
  hub = await startHubDouble([{ id: REPO, dir: TINY }]);
});
afterAll(async () => {
  await hub.close();
  await rm(work, { recursive: true, force: true });
});
let n = 0;
/** A fresh, empty Hugging Face cache for one test. */
const freshCache = () => path.join(work, `cache-${n++}`);

/** `mcprl ARGS…` to its end, in the repository, with `env` added to this process's environment. */
async function cli(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', ENTRY, ...args], {
      cwd: REPO_ROOT, env: { ...process.env, ...env }, timeout: 280_000, // a safety net under the test timeout, not a speed check
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; code?: number };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

describe('--model HUB_ID', () => {
  it('with nothing cached and HF_HUB_OFFLINE, says in one line how to get the weights (train, eval, serve, export)', async () => {
    const env = { HF_HUB_CACHE: freshCache(), HF_HUB_OFFLINE: '1' };
    const target = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
    const runs = await Promise.all([
      cli(['train', '--model', 'Qwen/Qwen3-0.6B', '--offline', '--run', 'hub', '--runs-dir', path.join(work, 'runs'), ...target], env),
      cli(['eval', '--model', 'Qwen/Qwen3-0.6B', '--scenarios', path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'), ...target], env),
      cli(['serve', '--model', 'Qwen/Qwen3-0.6B', '--port', '0'], env),
      cli(['export', '--model', 'Qwen/Qwen3-0.6B', '--adapter', path.join(work, 'none'), '--out', path.join(work, 'out')], env),
    ]);
    for (const [i, command] of ['train', 'eval', 'serve', 'export'].entries()) {
      const r = runs[i];
      expect(r.code, command).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines, command).toHaveLength(1);
      expect(lines[0], command).toMatch(new RegExp(`^mcprl ${command}: (HUB_OFFLINE_MISSING: )?model Qwen/Qwen3-0.6B: no local folder of that name, the Hugging Face cache \\(${env.HF_HUB_CACHE}\\) has no snapshot`));
      expect(lines[0], command).toContain('To get the weights: unset HF_HUB_OFFLINE where the hub can be reached, or run `hf download Qwen/Qwen3-0.6B`');
    }
    // Nothing was made for the run that could not start.
    expect(existsSync(path.join(work, 'runs', 'hub'))).toBe(false);
  });

  it('train downloads the model, records its snapshot in the run, and --resume takes the same hub id (offline) but no other', async () => {
    const cache = freshCache();
    const env = { HF_HUB_CACHE: cache, HF_ENDPOINT: hub.url };
    const all = await loadScenarioSet(path.join(REPO_ROOT, 'fixtures', 'scenarios', 'bookshop'));
    const scenarios = path.join(work, 'scenarios');
    await writeScenarioSet(scenarios, all.train.slice(0, 2), all.val.slice(0, 1));
    const runs = path.join(work, 'runs');
    const target = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];
    const first = await cli(['train', '--model', REPO, '--scenarios', scenarios, '--run', 'hub', '--runs-dir', runs, '--max-steps', '0', '--max-turns', '2', '--max-tokens', '32', '--quiet', '--json', ...target], env);
    expect(first.code, first.stderr).toBe(0);
    const snapshot = path.join(repoCacheDir(REPO, env), 'snapshots', DOUBLE_COMMIT);
    expect(first.stderr).toContain(`mcprl train: downloading ${REPO}/config.json (0.5 kB)`);
    expect(JSON.parse(await readFile(path.join(runs, 'hub', 'config.json'), 'utf8')).model).toBe(snapshot);
    const offline = { ...env, HF_HUB_OFFLINE: '1' };
    const same = await cli(['train', '--model', REPO, '--run', 'hub', '--runs-dir', runs, '--resume', '--quiet', '--json', ...target], offline);
    expect(same.code, same.stderr).toBe(0);
    const other = await cli(['train', '--model', 'mcprl-test/other', '--run', 'hub', '--runs-dir', runs, '--resume', '--quiet', '--json', ...target], offline);
    expect(other.code).toBe(1);
    expect(other.stderr).toContain(`these differ: --model mcprl-test/other (the run has ${snapshot})`);
  });

  it('serve downloads the model from the hub into the cache and serves it under its hub id', async () => {
    const cache = freshCache();
    const child = runCli(['serve', '--model', REPO, '--port', '0'], { ...process.env, HF_HUB_CACHE: cache, HF_ENDPOINT: hub.url });
    const done = exited(child);
    try {
      const url = await listeningUrl(child);
      const models = (await (await fetch(`${url}/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual([REPO]);
    } finally {
      child.kill('SIGTERM');
    }
    const { stderr } = await done;
    const snapshot = path.join(repoCacheDir(REPO, { HF_HUB_CACHE: cache }), 'snapshots', DOUBLE_COMMIT);
    expect(stderr).toContain(`mcprl serve: downloading ${REPO}/model.safetensors (3.7 MB)`);
    expect(stderr).toContain(`mcprl serve: model ${REPO} at ${snapshot}`);
    expect(await readFile(path.join(snapshot, 'config.json'), 'utf8')).toBe(await readFile(path.join(TINY, 'config.json'), 'utf8'));
  });
});

describe('TrainableModel({ baseModel: HUB_ID }) on a LocalBackend', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('registers a model by hub id, downloading it where the backend runs, and refuses one the hub lacks naming the field', async () => {
    const cache = freshCache();
    vi.stubEnv('HF_HUB_CACHE', cache);
    vi.stubEnv('HF_ENDPOINT', hub.url);
    const downloads: string[] = [];
    const backend = new LocalBackend({ dir: path.join(work, 'backend'), onDownload: (p) => p.done === p.total && downloads.push(p.file) });
    try {
      const model = new TrainableModel({ project: 'hub', name: 'ttt', baseModel: REPO, lora: { rank: 2, alpha: 4, seed: 1 } });
      await model.register(backend);
      expect(model.step).toBe(0);
      expect(downloads.sort()).toEqual(['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
      const engine = backend.chatEngine(model);
      expect(engine.model.dir).toBe(path.join(repoCacheDir(REPO, { HF_HUB_CACHE: cache }), 'snapshots', DOUBLE_COMMIT));
      // The settings keep the hub id as given.
      expect(JSON.parse(await readFile(path.join(backend.dir, 'hub', 'ttt', 'model.json'), 'utf8')).baseModel).toBe(REPO);

      const missing = await new TrainableModel({ project: 'hub', name: 'other', baseModel: 'mcprl-test/absent' }).register(backend).catch((e: unknown) => e);
      expect(missing).toMatchObject({ code: 'BACKEND_INVALID', field: 'settings.baseModel' });
      expect((missing as Error).message).toContain(`settings.baseModel: model mcprl-test/absent: no local folder of that name, and ${hub.url} has no revision main of mcprl-test/absent (HTTP 404)`);
    } finally {
      await backend.close();
    }
  });
});
