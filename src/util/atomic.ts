/**
 * Crash-safe file writes. A run must survive `kill -9` at any moment, so every file is written to a temporary
 * sibling, flushed to disk, then renamed over the target (rename is atomic within a file system).
 */
import { open, rename, mkdir, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

let counter = 0;

/** Writes `data` to `file` atomically (temp file + fsync + rename). */
export async function writeFileAtomic(file: string, data: string | Uint8Array): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const tmp = join(dirname(file), `.${basename(file)}.${process.pid}.${counter++}.tmp`);
  const handle = await open(tmp, 'w');
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await rename(tmp, file);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
}

/** Writes a JSON value (pretty-printed, newline-terminated) atomically. */
export async function writeJsonAtomic(file: string, value: unknown): Promise<void> {
  await writeFileAtomic(file, JSON.stringify(value, null, 2) + '\n');
}

/** Writes one JSON object per line atomically. */
export async function writeJsonlAtomic(file: string, rows: readonly unknown[]): Promise<void> {
  await writeFileAtomic(file, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
}
