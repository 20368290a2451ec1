/**
 * `mcprl export [RUN] [--model DIR|HUB_ID] [--adapter DIR] --format peft|merged|onnx --out DIR`: a PEFT adapter
 * (validated copy), a merged Hugging Face folder, or an ONNX model of the forward pass. Given a training run,
 * the model is the run's base model and the adapter its best checkpoint's.
 */
import type { Command } from 'commander';
import { ExportError } from '../export/errors.js';
import { exportModel, ExportFormatSchema } from '../export/export-model.js';
import { removeUnfinishedOutputs } from '../export/out-dir.js';
import { resolveRun } from './report.js';
import { modelFolder, MODEL_OPTION_HELP } from './model-option.js';

interface ExportCliOptions {
  model?: string;
  runsDir: string;
  adapter?: string;
  format: string;
  out: string;
  dtype: string;
  externalData?: boolean;
  logits: string;
  force?: boolean;
}

export function registerExport(program: Command): Command {
  const cmd = program
    .command('export')
    .description('export a LoRA adapter (PEFT), a merged Hugging Face model, or an ONNX model')
    .argument('[run]', 'a training run (folder, or name under --runs-dir): its base model and best adapter')
    .option('--runs-dir <dir>', 'where runs live', 'runs')
    .option('--model <dir|hub-id>', `base model: ${MODEL_OPTION_HELP}; default: the run's`)
    .option('--adapter <dir>', 'PEFT LoRA adapter folder (required for peft and merged; merged into the graph for onnx)')
    .option('--format <format>', 'peft | merged | onnx', 'peft')
    .requiredOption('--out <dir>', 'output folder (must not exist or be empty, unless --force)')
    .option('--dtype <dtype>', 'merged: keep (each tensor keeps the base dtype) | f32', 'keep')
    .option('--external-data', 'onnx: write the weights to model.onnx.data (automatic above 1.5 GiB)')
    .option('--logits <which>', 'onnx: all (logits for every position) | last (the last position only)', 'all')
    .option('--force', 'replace the output folder if it exists');
  cmd.addHelpText(
    'after',
    `
Examples:
  mcprl export demo --format peft --out out/adapter          # the best adapter of runs/demo
  mcprl export --model models/qwen3 --adapter runs/x/checkpoints/best --format peft --out out/adapter
  mcprl export --model models/qwen3 --adapter runs/x/checkpoints/best --format merged --out out/merged
  mcprl export --model models/qwen3 --adapter runs/x/checkpoints/best --format onnx --out out/onnx`,
  );
  cmd.action(async (runName: string | undefined, opts: ExportCliOptions) => {
    // SIGINT/SIGTERM: the output folder is never half made, and its temporary folder (written beside it) goes too.
    const onSignal = (signal: NodeJS.Signals) => {
      const removed = removeUnfinishedOutputs();
      process.stderr.write(`mcprl export: stopped by ${signal}${removed.length > 0 ? `; the unfinished output ${removed.join(', ')} was removed` : ''}\n`);
      process.exit(signal === 'SIGINT' ? 130 : 143);
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    try {
      if (runName) {
        const run = resolveRun(runName, opts.runsDir);
        const state = await run.readState();
        if (!state) throw new Error(`${run.dir} has no completed step yet`);
        opts.model ??= (await run.readConfig<{ model: string }>()).model;
        if (!opts.adapter) {
          if (state.bestStep === 0) throw new Error(`${run.dir}: no trained step beat the untrained model, so there is no adapter to export`);
          opts.adapter = run.checkpoint(state.bestStep);
        }
      }
      if (!opts.model) throw new Error('give a run, or --model DIR|HUB_ID');
      const format = ExportFormatSchema.safeParse(opts.format);
      if (!format.success) throw new Error(`--format must be peft, merged or onnx (got ${JSON.stringify(opts.format)})`);
      const dtype = opts.dtype.toLowerCase();
      if (dtype !== 'keep' && dtype !== 'f32') throw new Error(`--dtype must be keep or f32 (got ${JSON.stringify(opts.dtype)})`);
      if (opts.logits !== 'all' && opts.logits !== 'last') throw new Error(`--logits must be all or last (got ${JSON.stringify(opts.logits)})`);
      const model = await modelFolder(opts.model, 'mcprl export');
      const summary = await exportModel({
        modelDir: model.dir,
        adapterDir: opts.adapter,
        format: format.data,
        out: opts.out,
        dtype: dtype === 'f32' ? 'F32' : 'keep',
        externalData: opts.externalData ? true : 'auto',
        logits: opts.logits,
        overwrite: opts.force ?? false,
      });
      process.stdout.write(`${summary.out}: ${summary.detail}\n`);
    } catch (err) {
      const kind = err instanceof ExportError ? `${err.code}: ` : '';
      const msg = err instanceof Error ? err.message : String(err);
      process.stderr.write(`mcprl export: ${kind}${msg.replace(/\s+/g, ' ').trim()}\n`);
      process.exitCode = 1;
    } finally {
      process.removeListener('SIGINT', onSignal);
      process.removeListener('SIGTERM', onSignal);
    }
  });
  return cmd;
}
