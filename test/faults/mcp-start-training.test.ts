/**
 * §5 of issue 12, as `mcprl mcp` meets a new user. start_training reported "started" for a target that could not
 * even be reached, and the run failed later; generate_scenarios followed by start_training on the bundled model
 * ended in a bare overlap refusal. Both now fail the start_training call itself, saying why and what to do.
 * The server is the real `mcprl mcp` over stdio, the targets real processes, the model the bundled tiny one.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, FIXTURE_TARGET, stdioClient, TINY_MODEL } from '../mcp-server-helpers.js';
import { fault } from './fault-table.js';

const ws = mkdtempSync(path.join(tmpdir(), 'mcprl-start-'));
let client: Client;

beforeAll(async () => {
  client = (await stdioClient(['--workspace', ws, '--models', path.dirname(TINY_MODEL)])).client;
});
afterAll(async () => {
  await client?.close();
  rmSync(ws, { recursive: true, force: true });
});

describe('start_training checks before it reports "started"', () => {
  it('a target that exits at once fails the call with the connection error, and no run is started', async () => {
    const broken = { command: process.execPath, args: ['-e', 'console.error("cannot open the database"); process.exit(3)'] };
    const r = await call(client, 'start_training', { target: broken, model: path.basename(TINY_MODEL), run: 'broken', offline: true });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/SERVER_EXITED/);
    expect(r.text).toMatch(/cannot open the database/);
    expect(r.text).not.toMatch(/started run/);
    expect(existsSync(path.join(ws, 'broken'))).toBe(false);
    fault('start_training with a target that exits at once', 'the call fails with the target\'s error; no run', 'SERVER_EXITED in the call, no run folder');
  });

  it('generate_scenarios then start_training on the bundled model: the refusal names the overlapping sets and what to use instead', async () => {
    const gen = await call(client, 'generate_scenarios', { target: FIXTURE_TARGET, name: 'fresh', offline: true, count: 24 });
    expect(gen.isError, gen.text).toBe(false);
    const r = await call(client, 'start_training', { target: FIXTURE_TARGET, model: path.basename(TINY_MODEL), run: 'overlap', scenarios: 'scenarios/fresh' });
    expect(r.isError).toBe(true);
    expect(r.text).toMatch(/SCENARIO_OVERLAP/);
    // Which sets overlap, and how many of the held-out scenarios each.
    expect(r.text).toMatch(/validation scenario\(s\) overlap other sets \(\d+ with (train|warm-up)/);
    expect(r.text).toMatch(/\d+ with warm-up/);
    // What to use instead.
    expect(r.text).toMatch(/Instead: this model was warmed up on the tasks in .*mcprl_warmup\.jsonl/);
    expect(r.text).toMatch(/fixtures\/scenarios\/bookshop/);
    expect(r.text).toMatch(/or remove \S+/);
    expect(existsSync(path.join(ws, 'overlap'))).toBe(false);
    fault('generate_scenarios → start_training on the bundled model', 'refused in the call: which sets overlap, what to use instead', 'SCENARIO_OVERLAP with the sets, counts and advice');
  });
});
