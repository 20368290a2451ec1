/**
 * Crash-safe writes, the only ones mcprl makes. A run must survive `kill -9` at any moment, so every file is
 * written to a temporary sibling, flushed to disk, then renamed over the target (rename is atomic within a file
 * system); a folder is filled beside its target and swapped in the same way.
 */
import { mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join, relative } from 'node:path';
import { McprlError } from './errors.js';

let counter = 0;

/**
 * A write that failed (the disk full, a folder not writable), naming the file it was for — never only the temporary
 * sibling, and never a bare `ENOSPC: no space left on device, write`, which names nothing. The file's previous
 * content, if any, is untouched.
 */
export class WriteError extends McprlError<'WRITE_FAILED'> {
  /** The errno code of the failure (ENOSPC, EACCES, …), when the system gave one. */
  readonly errno: string | undefined;
  constructor(
    readonly file: string,
    cause: unknown,
  ) {
    const errno = (cause as NodeJS.ErrnoException | undefined)?.code;
    const why = cause instanceof Error ? cause.message : String(cause);
    super('WRITE_FAILED', `could not write ${file}: ${errno === 'ENOSPC' ? 'the disk is full' : why}${errno === 'ENOSPC' ? ` (${why})` : ''}`, { cause });
    this.errno = errno;
  }
}

/** How writeFileAtomic creates its file. */
export interface WriteOptions {
  /**
   * Permission bits of the new file (less the umask), e.g. 0o600 for secrets. The temporary is created with them,
   * so the content is never readable by others, not even for a moment. Default 0o666.
   */
  mode?: number;
}

/** Writes `data` to `file` atomically (temp file + fsync + rename). Throws WriteError naming `file`. */
export async function writeFileAtomic(file: string, data: string | Uint8Array, options: WriteOptions = {}): Promise<void> {
  const tmp = join(dirname(file), `.${basename(file)}.${process.pid}.${counter++}.tmp`);
  try {
    await mkdir(dirname(file), { recursive: true });
    const handle = await open(tmp, 'w', options.mode ?? 0o666);
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
  } catch (e) {
    // A part-written temporary would hold on to the space that ran out.
    await rm(tmp, { force: true }).catch(() => undefined);
    throw new WriteError(file, e);
  }
}

/** Writes a JSON value (pretty-printed, newline-terminated) atomically. */
export async function writeJsonAtomic(file: string, value: unknown, options: WriteOptions = {}): Promise<void> {
  await writeFileAtomic(file, JSON.stringify(value, null, 2) + '\n', options);
}

/** Writes one JSON object per line atomically. */
export async function writeJsonlAtomic(file: string, rows: readonly unknown[]): Promise<void> {
  await writeFileAtomic(file, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
}

/**
 * Fills a folder atomically: `write` fills a temporary sibling, which then replaces `dir` by rename, so a
 * reader (or a resumed run after a crash) sees either the old complete folder or the new complete one.
 */
export async function writeDirAtomic(dir: string, write: (tmp: string) => Promise<void>): Promise<void> {
  const parent = dirname(dir);
  await mkdir(parent, { recursive: true });
  const stamp = `${process.pid}.${Date.now()}.${Math.floor(Math.random() * 1e9)}`;
  const tmp = join(parent, `.${basename(dir)}.${stamp}.tmp`);
  const old = join(parent, `.${basename(dir)}.${stamp}.old`);
  try {
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    await write(tmp);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    // Named as the file of the folder it was for, not of the temporary folder.
    if (e instanceof WriteError) throw new WriteError(join(dir, relative(tmp, e.file)), e.cause);
    // A failure of the file system (it has a syscall) is a write failure; anything else is the writer's own error.
    throw e instanceof Error && 'syscall' in e ? new WriteError(dir, e) : e;
  }
  let hadOld = false;
  try {
    await rename(dir, old);
    hadOld = true;
  } catch {
    // No previous folder.
  }
  try {
    await rename(tmp, dir);
  } catch (e) {
    throw new WriteError(dir, e);
  }
  if (hadOld) await rm(old, { recursive: true, force: true });
}

/** The temporary siblings writeFileAtomic and writeDirAtomic create (`.<name>.<pid>.<n>.tmp`). */
const TEMP = /^\..+\.tmp$/;

/**
 * Removes the temporaries that writes cut short by a kill left in `dir` and its subfolders, and returns their
 * paths. Only the folder's owner may call it (a run's lock holder): another writer's temporaries are live.
 */
export async function removeStrayTemps(dir: string): Promise<string[]> {
  const removed: string[] = [];
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return removed;
  }
  for (const e of entries) {
    const full = join(dir, e.name);
    if (TEMP.test(e.name)) {
      await rm(full, { recursive: true, force: true });
      removed.push(full);
    } else if (e.isDirectory()) {
      removed.push(...(await removeStrayTemps(full)));
    }
  }
  return removed;
}
