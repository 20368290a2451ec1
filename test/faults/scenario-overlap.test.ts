/**
 * §6 of issue 42: the pipeline accepts its own output. `mcprl train` refused sets that `mcprl scenarios` had just
 * generated (seeds 1 and 2 on a 7-tool library server), and so did start_training: the splitter shuffled scenarios
 * one by one, so two scenarios about one entity could land on both sides, which the held-out check then refused.
 * Now both use one overlap rule (src/scenarios/disjoint.ts) and a generated set always passes.
 *
 * The CLI and `mcprl mcp` run as real child processes against the real library server (test/helpers). The model
 * folder is deliberately incomplete (a config.json alone): the held-out check runs before the model is loaded, so a
 * run that gets past it fails on the model folder instead, in seconds, without training.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkHeldOut } from '../../src/mcp-rl/job.js';
import { connect } from '../../src/mcp/index.js';
import type { Target } from '../../src/mcp/types.js';
import { writeScenarioSet } from '../../src/scenarios/scenario.js';
import { generateScenarioSet } from '../../src/scenarios/scenario-set.js';
import { splitScenarios } from '../../src/scenarios/split.js';
import { PROGRESS_FILE } from '../../src/train/progress-log.js';
import type { ProgressEvent } from '../../src/util/progress.js';
import { largeScenarioSet } from '../../scripts/large-scenario-set.js';
import { call, stdioClient } from '../mcp-server-helpers.js';
import { everythingStdioTarget, filesystemTarget, fixtureStdioTarget, folderWithFiles, memoryTarget, REPO_ROOT, SEEDED_MEMORY, tsStdioTarget } from '../helpers/servers.js';
import { mcprl } from './cli.js';
import { fault } from './fault-table.js';

const LIBRARY = path.join(REPO_ROOT, 'test', 'helpers', 'library-server.ts');
const work = mkdtempSync(path.join(tmpdir(), 'mcprl-sets-'));
/** A model folder that passes the command line's checks and fails at load (see the file comment). */
const models = path.join(work, 'models');
const BROKEN = path.join(models, 'broken');

beforeAll(() => {
  mkdirSync(BROKEN, { recursive: true });
  writeFileSync(path.join(BROKEN, 'config.json'), JSON.stringify({ model_type: 'not-a-model' }));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('a scenario set that mcprl generated trains', () => {
  it('`mcprl scenarios --offline` then `mcprl train` on the 7-tool library server, seeds 1 and 2: no SCENARIO_OVERLAP', async () => {
    const observed: string[] = [];
    for (const seed of [1, 2]) {
      const dir = path.join(work, `set-${seed}`);
      const gen = await mcprl(['scenarios', '--offline', '--seed', String(seed), '--out', dir, '--', process.execPath, '--import', 'tsx', LIBRARY]);
      expect(gen.code, gen.stderr).toBe(0);
      const r = await mcprl(['train', '--model', BROKEN, '--scenarios', dir, '--runs-dir', path.join(work, 'runs'), '--run', `seed-${seed}`, '--quiet', '--', process.execPath, '--import', 'tsx', LIBRARY]);
      // Past the held-out check, the run fails on the model (and only there).
      expect(r.stderr).not.toMatch(/SCENARIO_OVERLAP|overlap/);
      expect(r.stderr).toMatch(/tokenizer\.json not found \(nothing was trained/);
      observed.push(`seed ${seed}: past the check (then fails on the model folder, which has no tokenizer)`);
    }
    fault('`mcprl train` on a set `mcprl scenarios` just generated (library server, seeds 1, 2)', 'the set passes the held-out check', observed.join('; '));
  });

  it('generate_scenarios then start_training (a model without warm-up tasks): the run starts', async () => {
    const { client } = await stdioClient(['--workspace', path.join(work, 'ws'), '--models', models]);
    try {
      const target = { command: process.execPath, args: ['--import', 'tsx', LIBRARY] };
      const gen = await call(client, 'generate_scenarios', { target, name: 'library', offline: true, count: 24, seed: 1 });
      expect(gen.isError, gen.text).toBe(false);
      const r = await call(client, 'start_training', { target, model: 'broken', run: 'library', scenarios: 'scenarios/library' });
      expect(r.isError, r.text).toBe(false);
      expect(r.text).toMatch(/started run library/);
      // The worker checks the set again before it loads the model, and fails on the model alone.
      const status = await call(client, 'training_status', { run: 'library', wait: true, timeout_s: 240 });
      expect(status.data.status).toBe('failed');
      expect(String(status.data.error)).not.toMatch(/SCENARIO_OVERLAP|overlap/);
      expect(String(status.data.error)).toMatch(/TOKENIZER_NOT_FOUND/);
      fault('generate_scenarios → start_training on the library server (seed 1)', 'the run starts', `started; the worker passed the check and failed on the model: ${String(status.data.error).slice(0, 60)}`);
    } finally {
      await client.close();
    }
  });

  it('`mcprl train` on a set of 6,000 scenarios reports reading, checking and writing it as progress events, and passes the check', async () => {
    const dir = path.join(work, 'large');
    const { train, val } = splitScenarios(largeScenarioSet(6000), { seed: 1 });
    await writeScenarioSet(dir, train, val);
    const r = await mcprl(['train', '--model', BROKEN, '--scenarios', dir, '--runs-dir', path.join(work, 'runs'), '--run', 'large', '--quiet', '--', process.execPath, '--import', 'tsx', LIBRARY]);
    expect(r.stderr).not.toMatch(/SCENARIO_OVERLAP|overlap/);
    const events = readFileSync(path.join(work, 'runs', 'large', PROGRESS_FILE), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as ProgressEvent);
    // Lines read; the training scenarios indexed, then the validation scenarios checked against them (no warm-up
    // set); scenarios written: 6,000 each, from 0 to all of them, never backwards.
    for (const phase of ['read_scenarios', 'check_scenarios', 'write_scenarios'] as const) {
      const es = events.filter((e) => e.phase === phase);
      expect(es.length, phase).toBeGreaterThan(2);
      expect(es.every((e) => e.total === 6000), phase).toBe(true);
      expect([es[0].done, es.at(-1)!.done], phase).toEqual([0, 6000]);
      expect(es.every((e, i) => i === 0 || e.done >= es[i - 1].done), phase).toBe(true);
    }
    fault('reading, checking and writing a large set (6,000 scenarios) before step 0', 'progress events {phase, done, total} for each; not every pair compared', `read/check/write: ${events.filter((e) => e.phase.endsWith('_scenarios')).length} events, each 0 → 6000/6000`);
  });

  it('every offline set of seeds 1..N on the fixture servers and the published servers passes the training set check', async () => {
    const memoryFile = path.join(work, 'memory.jsonl');
    writeFileSync(memoryFile, SEEDED_MEMORY);
    const userFiles = folderWithFiles();
    const servers: [string, Target, number][] = [
      ['library', tsStdioTarget(LIBRARY), 16],
      ['bookshop', fixtureStdioTarget(), 16],
      ['server-memory', memoryTarget(memoryFile), 6],
      ['server-filesystem', filesystemTarget(userFiles), 6],
      ['server-everything', everythingStdioTarget(), 3],
    ];
    const refused: string[] = [];
    let sets = 0;
    for (const [name, target, seeds] of servers) {
      const session = await connect(target);
      try {
        for (let seed = 1; seed <= seeds; seed++) {
          const set = await generateScenarioSet(session, { offline: true, seed });
          if (set.val.length === 0) continue;
          sets++;
          // BROKEN has no warm-up tasks, so this is the check of train against val alone, as `mcprl train` makes it.
          await checkHeldOut(set, BROKEN).catch((e: Error) => refused.push(`${name} seed ${seed}: ${e.message.slice(0, 160)}`));
        }
      } finally {
        await session.close();
      }
    }
    rmSync(userFiles, { recursive: true, force: true });
    expect(refused).toEqual([]);
    expect(sets).toBeGreaterThan(40);
    fault('offline sets of many seeds on 5 servers, checked as `mcprl train` checks them', 'all pass', `${sets} sets, ${refused.length} refused`);
  });
});
