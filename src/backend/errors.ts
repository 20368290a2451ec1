/**
 * The library's typed errors: one class with a code, naming the field at fault where there is one.
 */
import type { z } from 'zod';
import { McprlError } from '../util/errors.js';
import { safeParseFirst } from '../util/json-limits.js';

export type BackendErrorCode =
  /** A request (settings, groups, a step's config) failed its schema; `field` names the part at fault. */
  | 'BACKEND_INVALID'
  /** The model is not registered with this backend. */
  | 'BACKEND_NOT_REGISTERED'
  /** The model exists with other settings, or its name is served already for another project. */
  | 'BACKEND_CONFLICT'
  /** A remote backend answered with an error; `status` is its HTTP status. */
  | 'BACKEND_HTTP'
  /** A remote backend could not be reached. */
  | 'BACKEND_UNREACHABLE'
  /**
   * The caller's signal aborted a request to a remote backend. A step the server had begun still completes there
   * (its checkpoint is written whole); register again to learn the model's step.
   */
  | 'BACKEND_ABORTED'
  /** The model was used before `register()`, or after `delete()`, or the backend is closed. */
  | 'BACKEND_STATE'
  /** More rollouts failed than `maxFailures` allows; the error keeps the groups completed so far. */
  | 'GATHER_FAILED'
  /** The recorder saw no completion to build a trajectory from. */
  | 'RECORDER';

export class BackendError extends McprlError<BackendErrorCode> {
  /** The field at fault (`groups.0.trajectories.1.reward`), when one is. */
  readonly field: string | null;
  /** The HTTP status a server answers this error with (or answered, for BACKEND_HTTP). */
  readonly status: number;
  constructor(code: BackendErrorCode, message: string, opts: { field?: string | null; status?: number; cause?: unknown } = {}) {
    super(code, message, { cause: opts.cause });
    this.field = opts.field ?? null;
    this.status = opts.status ?? STATUS[code];
  }
}

const STATUS: Record<BackendErrorCode, number> = {
  BACKEND_INVALID: 400,
  BACKEND_NOT_REGISTERED: 404,
  BACKEND_CONFLICT: 409,
  BACKEND_HTTP: 502,
  BACKEND_UNREACHABLE: 502,
  BACKEND_ABORTED: 499,
  BACKEND_STATE: 409,
  GATHER_FAILED: 500,
  RECORDER: 400,
};

/**
 * Parses `value` with `schema`, or throws BACKEND_INVALID naming the first field at fault (under `what`). Validation
 * stops at that field: ten million bad elements are one issue, not ten million.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const r = safeParseFirst(schema, value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const field = [what, ...issue.path.map(String)].join('.');
  throw new BackendError('BACKEND_INVALID', `${field}: ${issue.message}`, { field });
}
