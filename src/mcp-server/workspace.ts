/**
 * The workspace: the one folder the MCP server reads and writes. Every path a tool accepts is resolved here and
 * refused when it leaves the folder — by `..`, by an absolute path elsewhere, or through a symbolic link that
 * points outside — and every path a tool returns is given relative to it, so results never reveal the layout
 * of the machine. Base models may also be read from extra read-only roots (`--models DIR`).
 *
 *   <workspace>/<run>/            training runs (the `mcprl train` run directory, plus job.json and train.log)
 *   <workspace>/scenarios/<name>/ scenario sets written by generate_scenarios
 *   <workspace>/evals/<name>/     evaluate's trajectories.jsonl and summary.json
 *   <workspace>/exports/<name>/   export_adapter's output
 */
import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { McprlError } from '../util/errors.js';

/** Folder names the server itself uses at the top of the workspace; no run may take them. */
export const RESERVED_NAMES = ['scenarios', 'evals', 'exports'] as const;

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$/;

/** True when `child` is `parent` or lies inside it (both absolute and normalised). */
function isInside(parent: string, child: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * The real path of `p`, following symbolic links in every part that exists. For a path that does not exist yet,
 * its nearest existing ancestor is resolved and the rest appended: a link anywhere above it still counts.
 */
function realpathLoose(p: string): string {
  let head = p;
  const tail: string[] = [];
  for (;;) {
    try {
      return path.join(realpathSync(head), ...tail.reverse());
    } catch {
      const parent = path.dirname(head);
      if (parent === head) return p;
      tail.push(path.basename(head));
      head = parent;
    }
  }
}

export class Workspace {
  /** The workspace folder's real path. */
  readonly root: string;
  /** Real paths of the folders base models may be read from (the workspace is always one). */
  readonly modelRoots: string[];

  constructor(root: string, modelRoots: string[] = []) {
    mkdirSync(root, { recursive: true });
    this.root = realpathSync(path.resolve(root));
    this.modelRoots = [this.root, ...modelRoots.map((r) => realpathSync(path.resolve(r)))];
  }

  /** A run, scenario-set or export name: letters, digits, `.`, `_`, `-`; no separators, no leading dot. */
  static checkName(name: string, what = 'name'): string {
    if (!NAME.test(name) || name === '.' || name === '..') {
      throw new McprlError('WORKSPACE', `${what} ${JSON.stringify(name)} is not allowed: use 1-80 letters, digits, '.', '_' or '-', starting with a letter or digit`);
    }
    return name;
  }

  /** A run name that is valid and not one of the server's own folders. */
  static checkRunName(name: string): string {
    Workspace.checkName(name, 'run name');
    if ((RESERVED_NAMES as readonly string[]).includes(name)) {
      throw new McprlError('WORKSPACE', `run name ${JSON.stringify(name)} is reserved (the server keeps ${RESERVED_NAMES.join(', ')} folders in the workspace)`);
    }
    return name;
  }

  /**
   * The absolute path of `p` (relative to the workspace, or absolute inside it), after checking that neither the
   * path nor any symbolic link on the way leads outside. `what` names the argument in error messages.
   */
  resolve(p: string, what = 'path'): string {
    return this.resolveIn([this.root], p, what);
  }

  /** Like resolve, but also accepts paths in the read-only model roots; relative paths are tried root by root. */
  resolveModel(p: string, what = 'model'): string {
    if (!path.isAbsolute(p)) {
      for (const root of this.modelRoots) {
        const candidate = path.resolve(root, p);
        if (existsSync(candidate)) return this.resolveIn([root], candidate, what, p);
      }
    }
    return this.resolveIn(this.modelRoots, p, what);
  }

  /** `shown` is how error messages name the path: as the client gave it, never as found on disk. */
  private resolveIn(roots: string[], p: string, what: string, shown = p): string {
    if (typeof p !== 'string' || p.trim() === '') throw new McprlError('WORKSPACE', `${what} is empty`);
    if (p.includes('\0')) throw new McprlError('WORKSPACE', `${what} contains a NUL character`);
    const abs = path.isAbsolute(p) ? path.normalize(p) : path.resolve(roots[0], p);
    const lexical = roots.find((r) => isInside(r, abs));
    if (!lexical) throw new McprlError('WORKSPACE', `${what} ${JSON.stringify(shown)} is outside the workspace; give a path relative to it`);
    const real = realpathLoose(abs);
    if (!roots.some((r) => isInside(r, real))) {
      throw new McprlError('WORKSPACE', `${what} ${JSON.stringify(shown)} leads outside the workspace through a symbolic link`);
    }
    return abs;
  }

  /** How a path inside the workspace (or a model root) is shown to clients: relative, with forward slashes. */
  display(abs: string): string {
    for (const root of this.modelRoots) {
      if (isInside(root, abs)) {
        // Relative to its root: resolveModel tries the roots in turn, so the shown path can be passed back.
        return path.relative(root, abs).split(path.sep).join('/') || '.';
      }
    }
    return path.basename(abs);
  }

  /** The folder of run `name` (which need not exist yet). */
  runDir(name: string): string {
    return this.resolve(Workspace.checkRunName(name), 'run');
  }
}
