/**
 * One entry point for the three export formats, shared by `mcprl export` and (later) the MCP server's
 * export tool, so that every caller validates the same way and gets the same summary back.
 */
import { z } from 'zod';
import { ExportError } from './errors.js';
import { readModelConfig } from './hf-folder.js';
import { mergeAdapter } from './merge.js';
import { exportOnnx } from './onnx.js';
import { exportPeft } from './peft.js';

export const ExportFormatSchema = z.enum(['peft', 'merged', 'onnx']);
export type ExportFormat = z.infer<typeof ExportFormatSchema>;

export const ExportRequestSchema = z.object({
  /** The base model: a Hugging Face folder (qwen3, qwen2 or llama). */
  modelDir: z.string(),
  /** A PEFT LoRA adapter folder. Required for 'peft' and 'merged'; optional for 'onnx' (merged into the graph). */
  adapterDir: z.string().optional(),
  format: ExportFormatSchema,
  /** The folder to write; it must not exist or be empty unless overwrite is set. */
  out: z.string(),
  /** 'merged' only. Default 'keep' (each tensor keeps the base model's dtype); 'F32' writes f32. */
  dtype: z.enum(['keep', 'F32']).optional(),
  /** 'onnx' only. Default 'auto' (external data above 1.5 GiB of weights). */
  externalData: z.union([z.boolean(), z.literal('auto')]).optional(),
  /** 'onnx' only. Default 'all' (logits [batch, seq, vocab]); 'last': the last position's only. */
  logits: z.enum(['all', 'last']).optional(),
  /** Default false. */
  overwrite: z.boolean().optional(),
});
export type ExportRequest = z.infer<typeof ExportRequestSchema>;

export interface ExportSummary {
  format: ExportFormat;
  out: string;
  /** Human-readable one-liner of what was written. */
  detail: string;
}

export async function exportModel(req: ExportRequest): Promise<ExportSummary> {
  const { spec } = await readModelConfig(req.modelDir);
  const needAdapter = () => {
    if (!req.adapterDir) throw new ExportError('BAD_ADAPTER', `format ${req.format} needs an adapter folder`);
    return req.adapterDir;
  };
  switch (req.format) {
    case 'peft': {
      const r = await exportPeft({ adapterDir: needAdapter(), spec, out: req.out, overwrite: req.overwrite });
      return { format: 'peft', out: req.out, detail: `PEFT adapter with ${r.pairs} LoRA pairs (${r.files.join(', ')})` };
    }
    case 'merged': {
      const r = await mergeAdapter({ modelDir: req.modelDir, adapterDir: needAdapter(), out: req.out, dtype: req.dtype, overwrite: req.overwrite });
      return { format: 'merged', out: req.out, detail: `${spec.modelType} HF folder, ${r.merged.length} weights merged, dtype ${req.dtype ?? 'keep'}, ${r.files.length} weight file(s)` };
    }
    case 'onnx': {
      const r = await exportOnnx({ modelDir: req.modelDir, adapterDir: req.adapterDir, out: req.out, externalData: req.externalData, logits: req.logits, overwrite: req.overwrite });
      const mb = (r.bytes / 1024 ** 2).toFixed(1);
      return { format: 'onnx', out: req.out, detail: `ONNX opset 17, ${mb} MiB${r.externalData ? ' (weights in model.onnx.data)' : ''}${req.logits === 'last' ? ', last-position logits' : ''}${req.adapterDir ? ', adapter merged' : ''}` };
    }
  }
}
