/**
 * Runs test/oracles/jinja_render.py: a model folder's chat template rendered by Python's jinja2 with
 * transformers' settings, as an independent check of @huggingface/jinja. Tests call requireOracle('jinja2')
 * before using it.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PYTHON } from '../helpers/oracles.js';

/** One apply_chat_template call: OpenAI-shaped messages, tools (null when none were given) and kwargs. */
export interface JinjaCase {
  messages: unknown[];
  tools: unknown[] | null;
  add_generation_prompt: boolean;
  kwargs: Record<string, unknown>;
}

export type JinjaResult = { text: string } | { error: string };

/** Renders every case with the chat template of `modelDir`'s tokenizer_config.json, in one Python process. */
export function jinjaRender(modelDir: string, cases: JinjaCase[]): JinjaResult[] {
  const dir = mkdtempSync(join(tmpdir(), 'mcprl-jinja-'));
  try {
    const request = join(dir, 'request.json');
    writeFileSync(request, JSON.stringify({ model_dir: modelDir, cases }));
    const script = fileURLToPath(new URL('./jinja_render.py', import.meta.url));
    const r = spawnSync(PYTHON, [script, request], { encoding: 'utf8', maxBuffer: 1 << 26 });
    if (r.status !== 0) throw new Error(`jinja_render.py failed: ${r.error?.message ?? r.stderr}`);
    return JSON.parse(r.stdout) as JinjaResult[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
