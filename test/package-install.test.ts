/**
 * The package as a user gets it: `npm pack` of this checkout, `npm install ./mcprl-<version>.tgz` into an empty
 * project (its dependencies from the npm registry; the native addon built by the package's install script), then,
 * from that project, the CLI (`npx mcprl inspect`, `scenarios`, `eval`, `train` against the fixture server and the
 * tiny model the package ships) and the library (a .ts file type-checked against the installed types, a .mjs file
 * run by node). One pack and one install serve every check.
 *
 * The pack runs in a copy of the checkout, so that its `prepare` (tsc) writes the copy's dist/ and not the one
 * other test files read while this one runs. Every npm child gets an environment without the npm_* variables of
 * an enclosing `npm test`, which would otherwise point the install at this checkout (npm_config_local_prefix).
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from './helpers/servers.js';

/** What the pack leaves out of the copy: installs and build outputs (the pack makes its own dist/). */
const NOT_COPIED = new Set(['node_modules', 'build', 'dist', 'runs', 'coverage', 'tmp']);
/** npm configuration a user sets on purpose, kept from the environment; every other npm_* variable is dropped. */
const KEPT_NPM_VARS = new Set(['npm_config_cache', 'npm_config_registry', 'npm_config_userconfig']);

interface Ran {
  stdout: string;
  stderr: string;
}

function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^npm_/i.test(k) && !KEPT_NPM_VARS.has(k.toLowerCase())) continue;
    if (k === 'INIT_CWD') continue;
    env[k] = v;
  }
  return { ...env, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false', ...extra };
}

/** Runs a command; rejects with the command, its exit status and the end of its output when it fails. */
function run(cmd: string, args: string[], cwd: string, extraEnv: Record<string, string> = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { cwd, env: cleanEnv(extraEnv), maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed: ${err.message}\n${stdout.slice(-4000)}\n${stderr.slice(-4000)}`));
      else resolve({ stdout, stderr });
    });
  });
}

let work: string;
let project: string;
let tarball: string;
/** The installed package, relative to the project (as a user would name its files). */
const PKG = path.join('node_modules', 'mcprl');
const SERVER = ['node', path.join(PKG, 'dist', 'fixtures', 'server', 'main.js')];
const MODEL = path.join(PKG, 'fixtures', 'models', 'tiny-bookshop');

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'mcprl-package-'));
  const stage = path.join(work, 'checkout');
  mkdirSync(stage);
  for (const entry of readdirSync(REPO_ROOT)) {
    if (entry.startsWith('.') || NOT_COPIED.has(entry)) continue;
    cpSync(path.join(REPO_ROOT, entry), path.join(stage, entry), { recursive: true });
  }
  // `prepare` compiles with the checkout's TypeScript.
  symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(stage, 'node_modules'), 'dir');
  const packed = await run('npm', ['pack', '--json', '--pack-destination', work], stage);
  const info = (JSON.parse(packed.stdout) as { filename: string; size: number; unpackedSize: number; entryCount: number }[])[0];
  tarball = path.join(work, info.filename);
  console.log(`package: ${info.filename}, ${(info.size / 1e6).toFixed(1)} MB packed, ${(info.unpackedSize / 1e6).toFixed(1)} MB unpacked, ${info.entryCount} files`);

  project = path.join(work, 'project');
  mkdirSync(project);
  writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'empty-project', version: '1.0.0', private: true, type: 'module' }, null, 2));
  // MCPRL_CUDA_LIB=skip: no CUDA library even where nvcc is found (the install is the CPU one; cuda-build.test.ts
  // covers that script). A relative path to the tarball, as the README has a user type it.
  const started = Date.now();
  const spec = path.relative(project, tarball);
  await run('npm', ['install', spec.startsWith('.') ? spec : `./${spec}`], project, { MCPRL_CUDA_LIB: 'skip' });
  console.log(`npm install of the tarball into an empty project: ${((Date.now() - started) / 1000).toFixed(0)} s`);
}, 1_800_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the packed tarball installed into an empty project', () => {
  it('ships what the CLI needs at run time and builds the addon on install', () => {
    const installed = path.join(project, PKG);
    for (const f of ['bin/mcprl.js', 'dist/src/index.js', 'dist/src/index.d.ts', 'dist/fixtures/server/main.js', 'fixtures/scenarios/bookshop/val.jsonl', 'build/Release/mcprl_native.node']) {
      expect(existsSync(path.join(installed, f)), f).toBe(true);
    }
    for (const f of ['model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'config.json']) expect(statSync(path.join(project, MODEL, f)).size).toBeGreaterThan(0);
    // Test-only packages stay out of a user's install.
    expect(existsSync(path.join(project, 'node_modules', 'onnxruntime-node'))).toBe(false);
    expect(existsSync(path.join(project, 'node_modules', 'typescript'))).toBe(false);
  });

  it('runs npx mcprl inspect, scenarios, eval and train', async () => {
    const mcprl = (...args: string[]) => run('npx', ['--no', 'mcprl', ...args], project);

    const inspect = await mcprl('inspect', '--', ...SERVER);
    expect(inspect.stdout).toMatch(/search_books\s+read-only/);

    await mcprl('scenarios', '--offline', '--count', '8', '--out', 'scenarios/bookshop', '--', ...SERVER);
    const lines = (split: string) => readFileSync(path.join(project, 'scenarios', 'bookshop', `${split}.jsonl`), 'utf8').split('\n').filter(Boolean);
    expect(lines('train').length + lines('val').length).toBe(8);

    const evaluated = await mcprl('eval', '--model', MODEL, '--scenarios', 'scenarios/bookshop', '--split', 'val', '--out', 'eval', '--json', '--', ...SERVER);
    const summary = JSON.parse(evaluated.stdout) as { per_scenario: unknown[] };
    expect(summary.per_scenario).toHaveLength(lines('val').length);
    expect(existsSync(path.join(project, 'eval', 'trajectories.jsonl'))).toBe(true);

    // Training the bundled model: on a set drawn apart from its warm-up (the packaged one, cut short). A set just
    // drawn from the same bookshop may ask about an entity the warm-up practised, which train rightly refuses.
    const packaged = path.join(project, 'node_modules', 'mcprl', 'fixtures', 'scenarios', 'bookshop');
    mkdirSync(path.join(project, 'scenarios', 'held-out'), { recursive: true });
    for (const [split, n] of [['train', 4], ['val', 3]] as const) {
      const kept = readFileSync(path.join(packaged, `${split}.jsonl`), 'utf8').split('\n').filter(Boolean).slice(0, n);
      writeFileSync(path.join(project, 'scenarios', 'held-out', `${split}.jsonl`), kept.join('\n') + '\n');
    }
    const trained = await mcprl('train', '--model', MODEL, '--scenarios', 'scenarios/held-out', '--run', 'first', '--max-steps', '1',
      '--groups-per-step', '2', '--rollouts-per-group', '2', '--eval-every', '1', '--quiet', '--json', '--', ...SERVER);
    const result = JSON.parse(trained.stdout) as { stopped: string; report: string };
    expect(result.stopped).toBe('max_steps');
    expect(existsSync(path.join(project, result.report))).toBe(true);
    const metrics = readFileSync(path.join(project, 'runs', 'first', 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean);
    expect(metrics.map((l) => (JSON.parse(l) as { step: number }).step)).toEqual([0, 1]);
  });

  it('imports the library from "mcprl": types checked by tsc, and run by node', async () => {
    writeFileSync(path.join(project, 'check.ts'), `import { gatherTrajectoryGroups, LocalBackend, TrainableModel, TrajectoryRecorder, type TrainResult } from 'mcprl';

export async function step(dir: string, baseModel: string): Promise<TrainResult> {
  const model = new TrainableModel({ project: 'p', name: 'n', baseModel, lora: { rank: 4, alpha: 8 } });
  await model.register(new LocalBackend({ dir }));
  const groups = await gatherTrajectoryGroups(['Say a number.'], async (task) => {
    const recorder = new TrajectoryRecorder();
    const client = model.openai({ fetch: recorder.fetch });
    const c = await client.chat.completions.create({ model: model.inferenceName, messages: [{ role: 'user', content: task }], max_tokens: 4 });
    return recorder.trajectory({ reward: c.choices[0].message.content ? 1 : 0 });
  }, { perGroup: 2 });
  // @ts-expect-error: the types are real (not any), so a learning rate that is not a number is an error
  await model.train(groups, { lr: 'fast' });
  return model.train(groups, { lr: 1e-3 });
}
`);
    // The checkout's TypeScript and Node types: what a user's project would have installed itself.
    writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true, skipLibCheck: true,
        types: ['node'], typeRoots: [path.join(REPO_ROOT, 'node_modules', '@types')],
      },
      files: ['check.ts'],
    }));
    await run(process.execPath, [path.join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'], project);

    // One recorded group whose two attempts are scored 0 and 1 (so the step has a signal), trained in the
    // installed engine, then answered by the trained adapter.
    writeFileSync(path.join(project, 'check.mjs'), `import { gatherTrajectoryGroups, LocalBackend, TrainableModel, TrajectoryRecorder } from 'mcprl';
const backend = new LocalBackend({ dir: 'library-models' });
const model = new TrainableModel({ project: 'p', name: 'n', baseModel: process.argv[2], lora: { rank: 4, alpha: 8 } });
await model.register(backend);
let attempt = 0;
const groups = await gatherTrajectoryGroups(['Say a number.'], async (task) => {
  const recorder = new TrajectoryRecorder();
  await model.openai({ fetch: recorder.fetch }).chat.completions.create({ model: model.inferenceName, messages: [{ role: 'user', content: task }], max_tokens: 4 });
  return recorder.trajectory({ reward: attempt++ % 2 });
}, { perGroup: 2, concurrency: 1 });
const result = await model.train(groups, { lr: 1e-3 });
const c = await model.openai().chat.completions.create({ model: model.inferenceName, messages: [{ role: 'user', content: 'Say a number.' }], max_tokens: 4 });
console.log(JSON.stringify({ trained: result.trained, step: result.step, adapter: c.mcprl_adapter }));
await backend.close();
`);
    const ran = await run(process.execPath, ['check.mjs', MODEL], project);
    const out = JSON.parse(ran.stdout.trim().split('\n').pop()!) as { trained: boolean; step: number; adapter: string };
    expect(out).toEqual({ trained: true, step: 1, adapter: 'n@step-1' });
  });
});
