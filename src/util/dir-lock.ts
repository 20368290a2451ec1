/**
 * A folder owned by one process at a time (a training run's folder): `<dir>/lock`, a FileLock (file-lock.ts) that
 * goes stale only when its owner is gone, never by age (a run trains for hours).
 */
import path from 'node:path';
import { McprlError } from './errors.js';
import { describeOwner, FileLock, ownerAlive, readLockFileOwner, type LockOwner } from './file-lock.js';

export { describeOwner, LockOwnerSchema, ownerAlive, processStart, type LockOwner } from './file-lock.js';

/** The lock file of a folder. */
export const lockFile = (dir: string) => path.join(dir, 'lock');

/** The folder's lock owner as recorded (null when unlocked or when the file cannot be read as one). */
export function readLockOwner(dir: string): LockOwner | null {
  return readLockFileOwner(lockFile(dir));
}

/** The live owner of the folder's lock, or null when nobody holds it. */
export function liveLockOwner(dir: string): LockOwner | null {
  const owner = readLockOwner(dir);
  return owner && ownerAlive(owner) ? owner : null;
}

/** A held folder lock; release() (or the process's exit) frees it. */
export class DirLock {
  private constructor(readonly dir: string, private readonly lock: FileLock) {}

  get owner(): LockOwner {
    return this.lock.owner;
  }

  /** The stale owner whose lock this one replaced, or null. */
  get tookOver(): LockOwner | null {
    return this.lock.tookOver;
  }

  /**
   * Takes the folder's lock for this process, or throws McprlError DIR_LOCKED naming the live owner. `what` names the
   * kind of process that holds such locks, for the message ("training run").
   */
  static acquire(dir: string, what: string): DirLock {
    const got = FileLock.tryAcquire(lockFile(dir), Infinity);
    if (got instanceof FileLock) return new DirLock(dir, got);
    if (got.claim) {
      throw new McprlError('LOCK_CLAIMED', `another process is taking over the stale lock ${lockFile(dir)} of ${describeOwner(got.holder)}; if none is, delete ${got.claim} and the lock`);
    }
    throw new McprlError('DIR_LOCKED', `${dir} is in use by another ${what}: ${describeOwner(got.holder)}; wait for it to end, or stop it`);
  }

  release(): void {
    this.lock.release();
  }
}
