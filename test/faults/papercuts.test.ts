/**
 * §5 of issue 12: every option a command accepts has an effect. `--timeout` (connect/initialize) was accepted by
 * `mcprl eval` and ignored, so a server that never answers initialize cost the 30 s default; `mcprl train` used
 * it only to generate scenarios. The target here is a real process that never speaks MCP.
 *
 * `mcprl train --chat-template-kwargs` reaches the chat template in rollouts and in training tokenisation: the
 * bundled model's template, made to refuse any prompt rendered without a variable, trains with it and fails without.
 */
import { copyFile, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_SERVER_MAIN, freePort, REPO_ROOT } from '../helpers/servers.js';
import { call, FIXTURE_TARGET, stdioClient } from '../mcp-server-helpers.js';
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

describe('`mcprl train --chat-template-kwargs`', () => {
  const SMALL = ['--groups-per-step', '1', '--rollouts-per-group', '2', '--max-turns', '2', '--max-tokens', '16', '--concurrency', '2', '--max-steps', '1', '--eval-every', '1'];
  const FIXTURE = ['--', process.execPath, '--import', 'tsx', FIXTURE_SERVER_MAIN];

  /** The bundled model, whose chat template raises unless it is rendered with `mcprl_marker` set. */
  async function modelNeedingKwarg(): Promise<string> {
    const dir = path.join(work, 'needs-kwarg');
    await mkdir(dir);
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json']) await copyFile(path.join(MODEL, f), path.join(dir, f));
    await symlink(path.join(MODEL, 'model.safetensors'), path.join(dir, 'model.safetensors'));
    const tc = JSON.parse(await readFile(path.join(MODEL, 'tokenizer_config.json'), 'utf8')) as { chat_template: string };
    tc.chat_template = "{%- if mcprl_marker is not defined %}{{ raise_exception('rendered without mcprl_marker') }}{%- endif %}" + tc.chat_template;
    await writeFile(path.join(dir, 'tokenizer_config.json'), JSON.stringify(tc));
    return dir;
  }

  it('renders every rollout and training prompt with the variables; without them the template refuses', async () => {
    const model = await modelNeedingKwarg();
    // The runs folder is also `mcprl mcp`'s workspace below.
    const runs = path.join(work, 'kw-runs');
    const without = await mcprl(['train', '--model', model, '--scenarios', scenarios, '--run', 'without', '--runs-dir', runs, '--quiet', ...SMALL, ...FIXTURE]);
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/rendered without mcprl_marker/);

    const withKw = await mcprl(['train', '--model', model, '--scenarios', scenarios, '--run', 'with', '--runs-dir', runs, '--quiet', '--json', ...SMALL,
      '--chat-template-kwargs', '{"mcprl_marker": true}', ...FIXTURE]);
    expect(withKw.stderr).not.toMatch(/rendered without mcprl_marker/);
    expect(withKw.code).toBe(0);
    // Step 1 tokenised its rollouts through the same template (it would have raised otherwise) and trained.
    const state = JSON.parse(await readFile(path.join(runs, 'with', 'state.json'), 'utf8')) as { step: number };
    expect(state.step).toBe(1);
    const config = JSON.parse(await readFile(path.join(runs, 'with', 'config.json'), 'utf8')) as { chatTemplateKwargs?: unknown };
    expect(config.chatTemplateKwargs).toEqual({ mcprl_marker: true });
    fault('`mcprl train` on a chat template that needs a variable', 'fails without --chat-template-kwargs, trains with it', 'template refusal without; step 1 committed with');

    // `mcprl mcp` asks a run's agent the way the run trained it (its config's variables); a model without a run
    // takes them from the call.
    const { client } = await stdioClient(['--workspace', runs, '--models', work]);
    try {
      const task = 'Can you check the book bk-030 and report its year?';
      const fromRun = await call(client, 'run_agent', { target: FIXTURE_TARGET, run: 'with', checkpoint: 'latest', task, max_turns: 2, max_tokens: 16 });
      expect(fromRun.text).not.toMatch(/rendered without mcprl_marker/);
      expect(fromRun.isError).toBe(false);
      const bare = await call(client, 'run_agent', { target: FIXTURE_TARGET, model: model, task, max_turns: 2, max_tokens: 16 });
      expect(bare.isError || bare.data.error !== null).toBe(true);
      expect(bare.text + JSON.stringify(bare.data)).toMatch(/rendered without mcprl_marker/);
      const given = await call(client, 'run_agent', { target: FIXTURE_TARGET, model: model, task, max_turns: 2, max_tokens: 16, chat_template_kwargs: { mcprl_marker: true } });
      expect(given.isError).toBe(false);
      expect(given.data.error).toBeNull();
      const evaluated = await call(client, 'evaluate', { target: FIXTURE_TARGET, run: 'with', checkpoint: 'latest', max_turns: 2, max_tokens: 16, name: 'kw' });
      expect(evaluated.isError).toBe(false);
      expect(evaluated.data.summary.rollout_errors).toBe(0);
    } finally {
      await client.close();
    }
    fault('`mcprl mcp` run_agent / evaluate on a run trained with template variables', "renders with the run's variables (or the call's)", 'run_agent and evaluate answer; a bare model refuses until given them');
  });

  it('refuses a value that is not a JSON object, saying what it expected', async () => {
    const r = await mcprl(['train', '--model', MODEL, '--scenarios', scenarios, '--run', 'bad-kw', '--runs-dir', path.join(work, 'kw-runs'), '--chat-template-kwargs', '[1]', ...FIXTURE]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--chat-template-kwargs.*expected a JSON object/);
  });
});
