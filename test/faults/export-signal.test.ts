/**
 * Issue 42 §4: SIGTERM during `mcprl export --format merged` left its `.partial` folder (161 MB) beside the output.
 * The export removes its unfinished output on SIGINT/SIGTERM; and what a process that could not clean up left
 * (SIGKILL) is swept by the next export of the same output. The real CLI as a child process, signalled by itself at an
 * exact point (test/faults/kill-at.ts): just before it writes the merged model's config.json, when the weights are
 * already written into the temporary folder.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Model } from '../../src/engine/model.js';
import { Trainer } from '../../src/engine/trainer.js';
import { REPO_ROOT } from '../helpers/servers.js';
import { mcprl, mcprlKilledAt } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
const AT = 'before:writeFile:config.json';
let work: string;
let adapter: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-export-signal-'));
  adapter = path.join(work, 'adapter');
  const model = await Model.load(MODEL);
  try {
    const t = await Trainer.create(model, { adapterName: 'a', rank: 4, alpha: 8, targets: ['q_proj', 'v_proj'], seed: 1, optimizer: { lr: 1e-3 } });
    await t.saveAdapter(adapter);
    t.close();
  } finally {
    model.close();
  }
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

const exportArgs = (out: string) => ['export', '--model', MODEL, '--adapter', adapter, '--format', 'merged', '--out', out];

/** The temporary folders of `out` beside it. */
async function partials(out: string): Promise<string[]> {
  return (await readdir(path.dirname(out))).filter((e) => e.startsWith(`.${path.basename(out)}.partial-`));
}

describe('an export stopped by a signal', () => {
  it('SIGTERM mid-export: exits 143 and leaves neither the output nor its partial folder', async () => {
    const out = path.join(work, 'term', 'merged');
    const r = await mcprlKilledAt(exportArgs(out), AT, 'SIGTERM');
    expect(r.signal, r.stderr).toBeNull();
    expect(r.code, r.stderr).toBe(143);
    expect(r.stderr).toMatch(/stopped by SIGTERM; the unfinished output .*\.merged\.partial-\d+ was removed/);
    expect(await partials(out)).toEqual([]);
    expect(existsSync(out)).toBe(false);
    fault('SIGTERM during mcprl export --format merged (weights written, config.json not yet)', 'exit 143; no output and no .partial folder left',
      'exit 143; the .partial folder removed; no output');
  }, 120_000);

  it("a partial left by a killed export (SIGKILL) is swept by the next export of the same output; a live process's is kept", async () => {
    const out = path.join(work, 'kill', 'merged');
    const killed = await mcprlKilledAt(exportArgs(out), AT, 'SIGKILL');
    expect(killed.signal, killed.stderr).toBe('SIGKILL');
    const stale = await partials(out);
    expect(stale, 'what the killed export left').toHaveLength(1);
    // A partial of a process that still runs (this test's) is another export under way: not the next run's to remove.
    const live = path.join(path.dirname(out), `.merged.partial-${process.pid}`);
    await mkdir(live);
    await writeFile(path.join(live, 'model.safetensors'), 'in progress');

    const again = await mcprl(exportArgs(out));
    expect(again.code, again.stderr).toBe(0);
    expect(existsSync(path.join(out, 'config.json'))).toBe(true);
    expect(await partials(out)).toEqual([path.basename(live)]);
    fault('a .partial folder left by an export killed with SIGKILL, then the same export again', 'the next export removes the stale partial (not a live one) and succeeds',
      `removed ${stale[0].replace(/\d+$/, 'PID')}; kept the live one; exit 0`);
  }, 120_000);
});
