/**
 * A folder owned by one process at a time (a training run's folder): `<dir>/lock` names the owner by pid and by
 * the process's start time, so that a pid the system has since given to another process is not mistaken for the
 * owner. The lock is created whole and exclusively — its text is written to a private file opened with `wx`,
 * which is then hard-linked to `lock` (link, like O_EXCL, fails when the name exists) — so a reader never sees a
 * half-written lock. A lock whose owner is gone (the pid is dead, or now belongs to a process that started at
 * another time) is stale; it is taken over through a claim file named after that very owner, which only one
 * process can create, so two processes that find the same stale lock cannot both take it.
 */
import { closeSync, existsSync, linkSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { McprlError } from './errors.js';

export const LockOwnerSchema = z.object({
  pid: z.number().int().positive(),
  /** The process's start time (Linux: clock ticks after boot, /proc/PID/stat field 22); null where unknown. */
  start: z.string().nullable(),
  host: z.string(),
  /** When the lock was taken (ISO 8601), for people. */
  since: z.string(),
});
export type LockOwner = z.infer<typeof LockOwnerSchema>;

/** The lock file of a folder. */
export const lockFile = (dir: string) => path.join(dir, 'lock');

/** Fields 3… of /proc/PID/stat (state first), or null without procfs or when the process is gone. */
function statFields(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** A process's start time as the kernel records it (null without procfs or when the process is gone). */
export function processStart(pid: number): string | null {
  return statFields(pid)?.[19] ?? null;
}

/** True while the owner's process runs: its pid is alive and (where known) started when the owner did. */
export function ownerAlive(owner: LockOwner): boolean {
  if (owner.host !== hostname()) return true; // another machine's process: it cannot be checked from here
  try {
    process.kill(owner.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const fields = statFields(owner.pid);
  // A zombie has ended; it only waits for its parent to collect its exit status.
  if (fields?.[0] === 'Z') return false;
  const start = fields?.[19] ?? null;
  return owner.start === null || start === null || start === owner.start;
}

/** The folder's lock owner as recorded (null when unlocked or when the file cannot be read as one). */
export function readLockOwner(dir: string): LockOwner | null {
  try {
    const parsed = LockOwnerSchema.safeParse(JSON.parse(readFileSync(lockFile(dir), 'utf8')));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** The live owner of the folder's lock, or null when nobody holds it. */
export function liveLockOwner(dir: string): LockOwner | null {
  const owner = readLockOwner(dir);
  return owner && ownerAlive(owner) ? owner : null;
}

export const describeOwner = (o: LockOwner) => `pid ${o.pid} (started ${o.since}${o.start !== null ? `, process start ${o.start}` : ''}${o.host !== hostname() ? ` on ${o.host}` : ''})`;

export class DirLockedError extends McprlError<'DIR_LOCKED'> {
  constructor(readonly dir: string, readonly owner: LockOwner, what: string) {
    super('DIR_LOCKED', `${dir} is in use by another ${what}: ${describeOwner(owner)}; wait for it to end, or stop it`);
  }
}

let claims = 0;

/** A held lock; release() (or the process's exit) frees it. */
export class DirLock {
  private released = false;
  private readonly onExit = () => this.release();
  private constructor(readonly dir: string, readonly owner: LockOwner, readonly tookOver: LockOwner | null) {
    process.once('exit', this.onExit);
  }

  /**
   * Takes the folder's lock for this process, or throws DirLockedError naming the live owner. `what` names the
   * kind of process that holds such locks, for the message ("training run").
   */
  static acquire(dir: string, what: string): DirLock {
    const me: LockOwner = { pid: process.pid, start: processStart(process.pid), host: hostname(), since: new Date().toISOString() };
    // Not named like atomic.ts's temporaries, which a run's owner sweeps away at start.
    const mine = path.join(dir, `.lock-${process.pid}-${claims++}.new`);
    const fd = openSync(mine, 'wx');
    try {
      writeSync(fd, JSON.stringify(me) + '\n');
    } finally {
      closeSync(fd);
    }
    let tookOver: LockOwner | null = null;
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          linkSync(mine, lockFile(dir));
          return new DirLock(dir, me, tookOver);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw e;
        }
        const owner = readLockOwner(dir);
        if (owner === null) {
          throw new McprlError('DIR_LOCK_UNREADABLE', `${lockFile(dir)} is not a lock mcprl can read; if no mcprl process uses ${dir}, delete it`);
        }
        if (ownerAlive(owner)) throw new DirLockedError(dir, owner, what);
        // Stale: only the process that creates the claim for this very owner removes its lock.
        const claim = `${lockFile(dir)}.stale-${owner.pid}-${owner.start ?? 'x'}`;
        try {
          closeSync(openSync(claim, 'wx'));
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
          throw new McprlError('DIR_LOCK_CLAIMED', `another process is taking over the stale lock ${lockFile(dir)} of ${describeOwner(owner)}; if none is, delete ${claim} and the lock`);
        }
        unlinkSync(lockFile(dir));
        unlinkSync(claim);
        tookOver = owner;
      }
    } finally {
      unlinkSync(mine);
    }
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    process.removeListener('exit', this.onExit);
    // Only our own lock is removed (a lock someone took over from us after we were presumed dead stays).
    const owner = readLockOwner(this.dir);
    if (owner && owner.pid === this.owner.pid && owner.start === this.owner.start && owner.since === this.owner.since && existsSync(lockFile(this.dir))) {
      unlinkSync(lockFile(this.dir));
    }
  }
}
