/**
 * `mcprl serve --model DIR|HUB_ID [--adapter [NAME=]DIR]... [--host 127.0.0.1] [--port 8000]`: an OpenAI-compatible
 * chat-completions endpoint for a model folder and its LoRA adapters, on mcprl's own engine.
 */
import { Option, type Command } from 'commander';
import { ChatEngine, DEFAULT_MAX_TOKENS } from '../chat/chat-engine.js';
import { chooseDevice, describeDevice, DeviceOptionsSchema, type Device } from '../engine/device.js';
import { PrefixCacheMibSchema } from '../engine/prefix-cache.js';
import { KvCacheMibSchema } from '../engine/kv-cache.js';
import { WeightDtypeSchema, type WeightDtype } from '../engine/weight-dtype.js';
import { parseAdapterSpec } from '../serve/adapter-spec.js';
import { MaxAdaptersSchema } from '../serve/lora-adapters.js';
import { startServer } from '../serve/server.js';
import { checkBind, checkToken } from '../util/http-guard.js';
import { modelFolder, MODEL_OPTION_HELP } from './model-option.js';
import { numberParser } from './parse-number.js';
import { addSchemaOptions } from './schema-options.js';
import { addGuardOptions, closeOnSignal, reportFailure } from './server-process.js';

interface ServeCliOptions {
  model: string;
  adapter: string[];
  host: string;
  port: number;
  servedModelName?: string;
  threads?: number;
  device?: Device;
  weightDtype?: WeightDtype;
  prefixCacheMib?: number;
  kvCacheMib?: number;
  maxTokens: number;
  chatTemplateKwargs?: string;
  constrainToolCalls: boolean;
  loraUpdating: boolean;
  maxAdapters?: number;
  token?: string;
  allowedHost?: string[];
  allowedOrigin?: string[];
  quiet?: boolean;
}

export function registerServe(program: Command): Command {
  const cmd = program
    .command('serve')
    .description('serve a model (and LoRA adapters) over an OpenAI-compatible chat-completions API')
    .requiredOption('--model <dir|hub-id>', `base model: ${MODEL_OPTION_HELP}`)
    .option(
      '--adapter <[name=]dir>',
      'PEFT LoRA adapter folder, served under NAME or the folder name (repeatable)',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option('--host <host>', 'address to listen on (beyond loopback a token is required)', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0: any free port)', numberParser({ integer: true, min: 0, max: 65535 }), 8000)
    .option('--token <token>', "bearer token every request but /health must carry, the clients' API key (default: $MCPRL_SERVE_TOKEN; none on loopback)")
    .option('--served-model-name <name>', 'name of the base model in /v1/models (default: the hub id, or the folder name)')
    .option('--threads <n>', 'engine threads (default: the engine default)', numberParser({ integer: true, above: 0 }))
    .addOption(
      new Option('--weight-dtype <dtype>', 'how base weights are kept in memory: auto (as stored: bf16/f16 stay 16-bit), f32 (widened), bf16 (default: auto)').choices(
        WeightDtypeSchema.unwrap().options,
      ),
    )
    .option(
      '--prefix-cache-mib <n>',
      `memory for the prefix cache (KV of earlier prompts' starts, reused by prompts that begin alike), 0 off; results are the same either way (default: ${PrefixCacheMibSchema.parse(undefined)})`,
      numberParser({ integer: true, min: 0 }),
    )
    .option(
      '--kv-cache-mib <n>',
      'memory for the KV cache in MiB (running requests and the prefix cache together); requests wait for room beyond it (default: half the memory available less the weights)',
      numberParser({ integer: true, above: 0, max: KvCacheMibSchema.maxValue ?? undefined }),
    )
    .option('--max-tokens <n>', 'completion length when a request sets no max_tokens', numberParser({ integer: true, above: 0 }), DEFAULT_MAX_TOKENS)
    .option('--chat-template-kwargs <json>', 'chat template variables for every request, e.g. \'{"enable_thinking": false}\'')
    .option('--no-constrain-tool-calls', "decode tool calls freely (by default they are constrained to the tools' schemas; a request may set constrain_tool_calls)")
    .option('--no-lora-updating', "refuse vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter (on by default: adapters can be loaded, replaced and unloaded while serving)")
    .option(
      '--max-adapters <n>',
      `most LoRA adapters served at once, --adapter ones included; a load of a new name past it is refused (default: ${MaxAdaptersSchema.parse(undefined)})`,
      numberParser({ integer: true, min: 1, max: 4096 }),
    )
    .option('--quiet', 'do not log one line per request to stderr');
  addSchemaOptions(cmd, DeviceOptionsSchema);
  addGuardOptions(cmd);
  cmd.addHelpText(
    'after',
    `
Examples:
  mcprl serve --model models/qwen3 --adapter agent=runs/x/checkpoints/best --port 8000
  curl http://127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model": "agent", "messages": [{"role": "user", "content": "hi"}]}'`,
  );
  cmd.action(async (opts: ServeCliOptions) => {
    try {
      const { port, threads, maxTokens } = opts;
      // Checked before the model loads: a refused start should not take a model's load time to say so.
      const token = opts.token ?? (process.env.MCPRL_SERVE_TOKEN || undefined);
      if (token !== undefined) checkToken(token);
      await checkBind(opts.host, token, 'mcprl serve');
      const maxAdapters = MaxAdaptersSchema.parse(opts.maxAdapters);
      if (opts.adapter.length > maxAdapters) throw new Error(`${opts.adapter.length} adapters given, more than --max-adapters ${maxAdapters}`);
      let kwargs: Record<string, unknown> | undefined;
      if (opts.chatTemplateKwargs !== undefined) {
        const parsed = JSON.parse(opts.chatTemplateKwargs);
        if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('--chat-template-kwargs must be a JSON object');
        kwargs = parsed;
      }
      // A hub id is resolved (downloaded when missing) once the arguments are known good; a device that cannot run
      // is refused before the model loads, naming what is missing.
      const model = await modelFolder(opts.model, 'mcprl serve');
      const device = chooseDevice(opts.device, { modelDir: model.dir });
      const engine = await ChatEngine.load(model.dir, {
        adapters: opts.adapter.map(parseAdapterSpec),
        ...(threads !== undefined ? { threads } : {}),
        ...(opts.device !== undefined ? { device: opts.device } : {}),
        ...(opts.weightDtype ? { weightDtype: opts.weightDtype } : {}),
        ...(opts.prefixCacheMib !== undefined ? { prefixCacheMib: opts.prefixCacheMib } : {}),
        ...(opts.kvCacheMib !== undefined ? { kvCacheMib: opts.kvCacheMib } : {}),
        defaultMaxTokens: maxTokens,
        ...(kwargs ? { chatTemplateKwargs: kwargs } : {}),
        modelName: opts.servedModelName ?? model.name,
        constrainToolCalls: opts.constrainToolCalls,
      });
      const running = await startServer(engine, {
        host: opts.host,
        port,
        loraUpdating: opts.loraUpdating,
        maxAdapters,
        ...(token !== undefined ? { token } : {}),
        ...(opts.allowedHost ? { allowedHosts: opts.allowedHost } : {}),
        ...(opts.allowedOrigin ? { allowedOrigins: opts.allowedOrigin } : {}),
        ...(opts.quiet ? {} : { log: (line: string) => process.stderr.write(`mcprl serve: ${line}\n`) }),
      });
      const names = engine.modelNames().map((m) => m.id).join(', ');
      process.stdout.write(`mcprl serve: listening on ${running.url} (models: ${names}; ${describeDevice(device)})\n`);
      // A parent that started this process with an IPC channel (scripts/demo.ts --split) gets the URL as data.
      process.send?.({ type: 'listening', url: running.url });
      closeOnSignal(async () => {
        await running.close();
        engine.close();
      });
    } catch (err) {
      reportFailure('serve', err);
    }
  });
  return cmd;
}
