/**
 * Code size: the files and functions too long for a reader to hold (issue 43). Lists every src/**\/*.ts file
 * (tests aside) over MAX_FILE_LINES lines, every function or method in them over MAX_FUNCTION_LINES lines, and
 * every native/**\/*.{cc,h,cu,cuh} file over MAX_FILE_LINES lines; test/code-size.test.ts fails on any of them
 * that ALLOWED does not name.
 *
 *   node --import tsx scripts/code-size.ts     (exit status 1 when an offender is not allowed)
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export const MAX_FILE_LINES = 600;
export const MAX_FUNCTION_LINES = 120;

/**
 * Offenders allowed for now, each with why. Keys: `file:<repo path>` for a long file, `function:<repo path>:<name>`
 * for a long function (names as offenders() gives them). An entry is a debt: keep this list short.
 */
export const ALLOWED: Readonly<Record<string, string>> = {
  // Kernels whose length is one op's:
  'file:native/cuda/attention.cu':
    "kernels: one op's f32, tensor-core and decode kernels, forward beside backward, sharing its tiles, shared-memory layouts and dispatch",
};

export interface Offender {
  /** The allow-list key (see ALLOWED). */
  key: string;
  file: string;
  /** The function's name, for a long function. */
  name?: string;
  line: number;
  lines: number;
  limit: number;
}

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function walk(dir: string, keep: (file: string) => boolean): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p, keep));
    else if (e.isFile() && keep(e.name)) out.push(p);
  }
  return out;
}

/** Lines as an editor counts them: a final newline does not start another line. */
function lineCount(text: string): number {
  if (text === '') return 0;
  return text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
}

/** A readable name for a function-like node: its own, its variable's or property's, or its callee's (callbacks). */
function nameOf(node: ts.SignatureDeclaration, sf: ts.SourceFile): string {
  const own = (node as { name?: ts.PropertyName }).name;
  const cls = ts.isClassLike(node.parent) && node.parent.name ? `${node.parent.name.text}.` : '';
  if (ts.isConstructorDeclaration(node)) return `${cls}constructor`;
  if (own) return cls + own.getText(sf);
  const p = node.parent;
  if (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p) || ts.isPropertyDeclaration(p)) return p.name.getText(sf);
  if (ts.isCallExpression(p)) return `${p.expression.getText(sf).replace(/\s+/g, '')} callback`;
  return `<anonymous at line ${sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1}>`;
}

/** Every function, method, accessor and constructor of a TypeScript source with a body over `limit` lines. */
export function longFunctions(file: string, source: string, limit = MAX_FUNCTION_LINES): Offender[] {
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const out: Offender[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = end - start + 1;
      if (lines > limit) {
        const name = nameOf(node, sf);
        out.push({ key: `function:${file}:${name}`, file, name, line: start + 1, lines, limit });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** Today's offenders in the repository at `root`: long files first, then long functions, each in path order. */
export function offenders(root = REPO_ROOT): Offender[] {
  const rel = (p: string) => path.relative(root, p).split(path.sep).join('/');
  const tsFiles = walk(path.join(root, 'src'), (n) => n.endsWith('.ts') && !n.endsWith('.test.ts') && !n.endsWith('.d.ts'));
  const nativeFiles = walk(path.join(root, 'native'), (n) => /\.(cc|h|cu|cuh)$/.test(n));
  const files: Offender[] = [];
  const functions: Offender[] = [];
  for (const abs of [...tsFiles, ...nativeFiles].sort()) {
    const file = rel(abs);
    const source = readFileSync(abs, 'utf8');
    const lines = lineCount(source);
    if (lines > MAX_FILE_LINES) files.push({ key: `file:${file}`, file, line: 1, lines, limit: MAX_FILE_LINES });
    if (file.endsWith('.ts')) functions.push(...longFunctions(file, source));
  }
  return [...files, ...functions];
}

function main(): void {
  const found = offenders();
  const keys = new Set(found.map((o) => o.key));
  let bad = 0;
  for (const o of found) {
    const why = ALLOWED[o.key];
    if (why === undefined) bad++;
    const what = o.name ? `${o.file}:${o.line} ${o.name}` : o.file;
    console.log(`${why === undefined ? 'OVER ' : 'allowed'} ${what}: ${o.lines} lines (limit ${o.limit})${why ? ` — ${why}` : ''}`);
  }
  for (const key of Object.keys(ALLOWED)) if (!keys.has(key)) console.log(`no longer needed in ALLOWED: ${key}`);
  console.log(`${found.length} over the limits, ${bad} not allowed`);
  process.exitCode = bad > 0 ? 1 : 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
