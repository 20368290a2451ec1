/**
 * §5 of issue 12: every option a command accepts has an effect. `--timeout` (connect/initialize) was accepted by
 * `mcprl eval` and ignored, so a server that never answers initialize cost the 30 s default; `mcprl train` used
 * it only to generate scenarios. The target here is a real process that never speaks MCP.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, REPO_ROOT } from '../helpers/servers.js';
import { bookshopScenarios, mcprl } from './cli.js';
import { fault } from './fault-table.js';

const MODEL = path.join(REPO_ROOT, 'fixtures', 'models', 'tiny-bookshop');
// A stdio "server" that reads its input and never answers.
const SILENT = ['--', process.execPath, '-e', 'process.stdin.resume()'];
let work: string;
let scenarios: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'mcprl-paper-'));
  scenarios = await bookshopScenarios(path.join(work, 'scen'), 2, 1);
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe('--timeout has an effect', () => {
  it('`mcprl eval --timeout 1500` gives up on a server that never answers initialize after 1500 ms', async () => {
    const r = await mcprl(['eval', '--scenarios', scenarios, '--model-base-url', `http://127.0.0.1:${await freePort()}/v1`, '--model', 'm', '--timeout', '1500', '--out', path.join(work, 'e'), ...SILENT]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/TIMEOUT: .*did not complete initialize within 1500 ms/);
    fault('`mcprl eval --timeout` with a silent server', 'gives up after --timeout', 'TIMEOUT after 1500 ms');
  });

  it('`mcprl train --timeout 1500` applies it to the rollouts\' connections too', async () => {
    const r = await mcprl(['train', '--model', MODEL, '--scenarios', scenarios, '--run', 't', '--runs-dir', path.join(work, 'runs'), '--timeout', '1500', '--quiet', ...SILENT]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/TIMEOUT: .*did not complete initialize within 1500 ms/);
    fault('`mcprl train --timeout` with a silent server', 'gives up after --timeout', 'TIMEOUT after 1500 ms');
  });
});
