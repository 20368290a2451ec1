/**
 * Export folders appear whole or not at all: everything is written into a sibling temporary folder
 * (`.<name>.partial-<pid>`) that is renamed to the output path at the end, so an interrupted export never leaves a
 * half-written model behind. A failure removes the temporary folder; a signal does too, where the command handles it
 * (removeUnfinishedOutputs); and what a killed process left (SIGKILL, a power cut) is swept by the next export of
 * the same output.
 */
import { existsSync, rmSync } from 'node:fs';
import { copyFile, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { pidAlive } from '../util/file-lock.js';
import { ExportError } from './errors.js';

/** Weight files of other formats are never copied next to exported weights (they would contradict them). */
const WEIGHT_FILE = /\.(safetensors|bin|pt|pth|ckpt|gguf|onnx|h5|msgpack)$|^model\.safetensors\.index\.json$|^pytorch_model\.bin\.index\.json$|\.onnx\.data$/;

/** The temporary folders this process is writing, for removeUnfinishedOutputs. */
const unfinished = new Set<string>();

/**
 * Removes, synchronously, the temporary folders of the exports this process has under way, and returns them: for a
 * command about to exit on a signal, which cannot wait for the exports to fail on their own.
 */
export function removeUnfinishedOutputs(): string[] {
  const removed = [...unfinished];
  for (const dir of removed) rmSync(dir, { recursive: true, force: true });
  unfinished.clear();
  return removed;
}

/** Removes the temporary folders of `target` that exports which have since ended left behind. */
async function sweepStalePartials(target: string): Promise<void> {
  const parent = dirname(target);
  if (!existsSync(parent)) return;
  const prefix = `.${basename(target)}.partial-`;
  for (const entry of await readdir(parent)) {
    if (!entry.startsWith(prefix)) continue;
    const pid = entry.slice(prefix.length);
    if (/^\d+$/.test(pid) && Number(pid) !== process.pid && !pidAlive(Number(pid))) await rm(join(parent, entry), { recursive: true, force: true });
  }
}

/**
 * Runs `write(tmpDir)` and then moves tmpDir to `out`. `out` must not exist or be an empty folder, unless
 * `overwrite` is set, in which case it is replaced.
 */
export async function writeOutputFolder(out: string, overwrite: boolean, write: (tmpDir: string) => Promise<void>): Promise<void> {
  const target = resolve(out);
  await sweepStalePartials(target);
  if (existsSync(target)) {
    const s = await stat(target);
    const empty = s.isDirectory() && (await readdir(target)).length === 0;
    if (!empty && !overwrite) throw new ExportError('OUTPUT_EXISTS', `${target}: output exists and is not an empty folder (pass overwrite / --force to replace it)`);
  }
  await mkdir(dirname(target), { recursive: true });
  const tmp = join(dirname(target), `.${basename(target)}.partial-${process.pid}`);
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp);
  unfinished.add(tmp);
  try {
    await write(tmp);
    await rm(target, { recursive: true, force: true });
    await rename(tmp, target);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  } finally {
    unfinished.delete(tmp);
  }
}

/**
 * Copies the files that travel with a model but are not weights (tokenizer files, chat template,
 * generation_config.json, ...). config.json is copied too unless `skip` names it.
 */
export async function copySideFiles(srcDir: string, outDir: string, skip: readonly string[] = []): Promise<string[]> {
  const copied: string[] = [];
  for (const entry of await readdir(srcDir, { withFileTypes: true })) {
    if (!entry.isFile() || WEIGHT_FILE.test(entry.name) || skip.includes(entry.name) || entry.name.startsWith('.')) continue;
    await copyFile(join(srcDir, entry.name), join(outDir, entry.name));
    copied.push(entry.name);
  }
  return copied.sort();
}
