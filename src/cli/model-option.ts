/**
 * `--model` as every command that runs a model takes it: a local Hugging Face folder, or a hub id whose files are
 * found in (or downloaded to) the Hugging Face cache by src/hf/hub.ts. Downloads report on stderr: a bar redrawn in
 * place on a terminal, one line per file otherwise.
 */
import path from 'node:path';
import { SUPPORTED_MODEL_TYPES } from '../hf/config.js';
import { resolveModel, type DownloadProgress } from '../hf/hub.js';
import { progressLines, type BarStream } from '../util/progress.js';

/** The help text of a --model option that takes a model (the architectures and both kinds of reference). */
export const MODEL_OPTION_HELP = `a Hugging Face model (${SUPPORTED_MODEL_TYPES.join(', ')}): a local folder, or a hub id such as Qwen/Qwen3-4B (from the Hugging Face cache, downloaded when missing; HF_TOKEN, HF_HUB_OFFLINE)`;

export interface ModelFolder {
  /** The folder the model's files are in. */
  dir: string;
  /** The name to serve and report it under: the hub id, or the local folder's name. */
  name: string;
}

/** Resolves `--model REF` to its folder, downloading what the cache lacks with progress on stderr. */
export async function modelFolder(ref: string, command: string, stream: BarStream = process.stderr): Promise<ModelFolder> {
  const dir = await resolveModel(ref, { onProgress: downloadProgress(command, stream) });
  if (dir === path.resolve(ref)) return { dir, name: path.basename(dir) };
  stream.write(`${command}: model ${ref} at ${dir}\n`);
  return { dir, name: ref };
}

const sizeText = (bytes: number) => (bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`);

/**
 * Renders download progress (src/util/progress.ts's progressLines): on a terminal a bar per file, redrawn in place;
 * elsewhere a line as each file starts.
 */
export function downloadProgress(command: string, stream: BarStream): (p: DownloadProgress) => void {
  const draw = progressLines(stream);
  let current = '';
  return (p) => {
    const file = `${p.repo}/${p.file}`;
    const starting = file !== current;
    current = file;
    const size = p.total > 0 ? sizeText(p.total) : 'size unknown';
    draw({
      label: `${command}: downloading ${file}`,
      done: p.done,
      total: p.total,
      figures: `${sizeText(p.done)}${p.total > 0 ? ` of ${sizeText(p.total)} ${Math.floor((p.done / p.total) * 100)}%` : ''}`,
      milestone: starting ? `${command}: downloading ${file} (${size}${p.done > 0 ? `, resuming at ${sizeText(p.done)}` : ''})` : undefined,
    });
  };
}
