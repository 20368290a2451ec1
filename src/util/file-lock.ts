/**
 * A file that one process at a time holds: the lock names its owner by pid and by the process's start time, so
 * that a pid the system has since given to another process is not mistaken for the owner. The lock is created
 * whole and exclusively — its text is written to a private file opened with `wx`, which is then hard-linked to the
 * lock's name (link, like O_EXCL, fails when the name exists) — so a reader never sees a half-written lock. A lock
 * whose owner is gone (the pid is dead, or now belongs to a process that started at another time), or that is older
 * than the lock's stale age, is stale; it is taken over through a claim file named after that very owner, which
 * only one process can create, so two processes that find the same stale lock cannot both take it.
 *
 * A training run's folder (dir-lock.ts) and a stored OAuth login (oauth-store.ts) are locked this way.
 */
import { closeSync, existsSync, linkSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { McprlError } from './errors.js';

export const LockOwnerSchema = z.object({
  pid: z.number().int().positive(),
  /** The process's start time (Linux: clock ticks after boot, /proc/PID/stat field 22); null where unknown. */
  start: z.string().nullable(),
  host: z.string(),
  /** When the lock was taken (ISO 8601): for people, and for locks that go stale with age. */
  since: z.string(),
});
export type LockOwner = z.infer<typeof LockOwnerSchema>;

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

/** True while process `pid` of this machine runs (one we may not signal runs too; a zombie has ended). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  // A zombie has ended; it only waits for its parent to collect its exit status.
  return statFields(pid)?.[0] !== 'Z';
}

/** True while the owner's process runs: its pid is alive and (where known) started when the owner did. */
export function ownerAlive(owner: LockOwner): boolean {
  if (owner.host !== hostname()) return true; // another machine's process: it cannot be checked from here
  if (!pidAlive(owner.pid)) return false;
  const start = processStart(owner.pid);
  return owner.start === null || start === null || start === owner.start;
}

/** True when the owner holds the lock no longer: its process is gone, or it took the lock over `staleAgeMs` ago. */
export function ownerStale(owner: LockOwner, staleAgeMs: number, now = Date.now()): boolean {
  if (!ownerAlive(owner)) return true;
  const since = Date.parse(owner.since);
  return Number.isFinite(since) && now - since > staleAgeMs;
}

/** The lock's owner as recorded (null when unlocked or when the file cannot be read as one). */
export function readLockFileOwner(file: string): LockOwner | null {
  try {
    const parsed = LockOwnerSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

export const describeOwner = (o: LockOwner) => `pid ${o.pid} (started ${o.since}${o.start !== null ? `, process start ${o.start}` : ''}${o.host !== hostname() ? ` on ${o.host}` : ''})`;

/** Why a lock was not taken: a live holder, or (with `claim`) another process taking over the stale lock of `holder`. */
export interface LockBusy {
  holder: LockOwner;
  /** The claim file of another process that is taking the stale lock over at this moment. */
  claim?: string;
}

/** How long FileLock.acquire waits for a live holder. */
export interface LockWait {
  /** How long to wait for the holder to release, in ms. */
  waitMs: number;
  /** How often to look again, in ms. */
  pollMs: number;
  /** Called each time the lock is found held, before waiting (tests observe the wait through it). */
  onWait?: (busy: LockBusy) => void;
}

let claims = 0;

/** A held lock; release() (or the process's exit) frees it. */
export class FileLock {
  private released = false;
  private readonly onExit = () => this.release();
  private constructor(readonly file: string, readonly owner: LockOwner, readonly tookOver: LockOwner | null) {
    process.once('exit', this.onExit);
  }

  /**
   * Takes the lock at `file` for this process, or says who holds it. A holder that is gone, or that took the lock
   * more than `staleAgeMs` ago (Infinity: never by age), is taken over.
   */
  static tryAcquire(file: string, staleAgeMs: number): FileLock | LockBusy {
    const me: LockOwner = { pid: process.pid, start: processStart(process.pid), host: hostname(), since: new Date().toISOString() };
    // Not named like atomic.ts's temporaries, which a run's owner sweeps away at start.
    const mine = path.join(path.dirname(file), `.${path.basename(file)}-${process.pid}-${claims++}.new`);
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
          linkSync(mine, file);
          return new FileLock(file, me, tookOver);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST' || attempt >= 3) throw e;
        }
        const owner = readLockFileOwner(file);
        if (owner === null) {
          // Released between our link and this read (the holder unlinked it): try the link again.
          if (!existsSync(file)) continue;
          throw new McprlError('LOCK_UNREADABLE', `${file} is not a lock mcprl can read; if no mcprl process uses it, delete it`);
        }
        if (!ownerStale(owner, staleAgeMs)) return { holder: owner };
        // Stale: only the process that creates the claim for this very owner removes its lock.
        const claim = `${file}.stale-${owner.pid}-${owner.start ?? 'x'}`;
        try {
          closeSync(openSync(claim, 'wx'));
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
          return { holder: owner, claim };
        }
        // A process that read the same owner before a takeover completed claims it afterwards: the lock is then
        // another's, and stays.
        const still = readLockFileOwner(file);
        if (still && sameOwner(still, owner)) {
          unlinkSync(file);
          tookOver = owner;
        }
        unlinkSync(claim);
      }
    } finally {
      unlinkSync(mine);
    }
  }

  /** Takes the lock, waiting up to `wait.waitMs` for a live holder; says who holds it when the wait runs out. */
  static async acquire(file: string, staleAgeMs: number, wait: LockWait): Promise<FileLock | LockBusy> {
    const deadline = Date.now() + wait.waitMs;
    for (;;) {
      const got = FileLock.tryAcquire(file, staleAgeMs);
      if (got instanceof FileLock || Date.now() >= deadline) return got;
      wait.onWait?.(got);
      await sleep(Math.min(wait.pollMs, Math.max(0, deadline - Date.now())));
    }
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    process.removeListener('exit', this.onExit);
    // Only our own lock is removed (a lock someone took over from us after we were presumed gone stays).
    const owner = readLockFileOwner(this.file);
    if (owner && sameOwner(owner, this.owner) && existsSync(this.file)) unlinkSync(this.file);
  }
}

const sameOwner = (a: LockOwner, b: LockOwner) => a.pid === b.pid && a.start === b.start && a.since === b.since && a.host === b.host;
