/**
 * The documentation cannot go stale silently: every `mcprl` command in a shell block of README.md or docs/*.md
 * is parsed by the real command line (src/cli/main.ts, with every action replaced by a no-op), every `npm run`
 * names a script of package.json, and every link between the pages reaches a file and, with #anchor, a heading.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Command, CommanderError } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../src/cli/main.js';
import { REPO_ROOT } from './helpers/servers.js';

const PAGES = ['README.md', ...readdirSync(path.join(REPO_ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const read = (page: string) => readFileSync(path.join(REPO_ROOT, page), 'utf8');

/** The logical lines of a page's sh/bash blocks (continuations joined, comments dropped), with their line numbers. */
function shellLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let inShell = false;
  let pending: { line: number; text: string } | null = null;
  text.split('\n').forEach((raw, i) => {
    const fence = /^```(\w*)/.exec(raw);
    if (fence) {
      inShell = !inShell && (fence[1] === 'sh' || fence[1] === 'bash');
      return;
    }
    if (!inShell) return;
    const code = stripComment(raw);
    const joined = pending ? `${pending.text} ${code.trim()}` : code.trim();
    const start = pending?.line ?? i + 1;
    if (joined.endsWith('\\')) pending = { line: start, text: joined.slice(0, -1).trim() };
    else {
      pending = null;
      if (joined) out.push({ line: start, text: joined });
    }
  });
  return out;
}

/** Drops a `# comment` (a # at the start or after whitespace, outside quotes). */
function stripComment(line: string): string {
  let quote: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = null;
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) return line.slice(0, i);
  }
  return line;
}

/** Shell words of one command line: quotes removed, `&&` / `;` / `|` split it into commands. */
function commands(line: string): string[][] {
  const out: string[][] = [[]];
  const re = /'([^']*)'|"([^"]*)"|(&&|\|\||;|\|)|(\S+)/g;
  for (const m of line.matchAll(re)) {
    if (m[3]) out.push([]);
    else out[out.length - 1].push(m[1] ?? m[2] ?? m[4]);
  }
  return out.filter((c) => c.length > 0);
}

/** The mcprl argv of a command (after `mcprl`, `npx mcprl` or `bin/mcprl.js`), or null when it runs something else. */
function mcprlArgs(words: string[]): string[] | null {
  const i = words.findIndex((w) => w === 'mcprl' || w.endsWith('bin/mcprl.js'));
  if (i < 0 || (i > 0 && !['npx', 'node'].includes(words[0]))) return null;
  return words.slice(i + 1);
}

/** The CLI with every action a no-op and errors thrown instead of exiting. */
function dryProgram(): Command {
  const program = buildProgram();
  const quiet = (c: Command) => c.exitOverride().configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
  quiet(program);
  // The program itself has no action, so an unknown command stays an error.
  for (const c of program.commands) quiet(c).action(() => undefined);
  return program;
}

/** Parses an mcprl argv: null when the CLI accepts it, else commander's message. */
async function parseError(args: string[]): Promise<string | null> {
  try {
    await dryProgram().parseAsync(args, { from: 'user' });
    return null;
  } catch (err) {
    if (err instanceof CommanderError && (err.code === 'commander.helpDisplayed' || err.code === 'commander.version')) return null;
    return (err as Error).message;
  }
}

/** GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -. */
const slug = (heading: string) => heading.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');

describe('the documentation', () => {
  it('finds commands to check on every page that shows any', () => {
    const counts = PAGES.map((p) => shellLines(read(p)).flatMap((l) => commands(l.text)).filter((c) => mcprlArgs(c)).length);
    expect(counts.reduce((a, b) => a + b, 0)).toBeGreaterThan(15);
    expect(PAGES).toContain('docs/commands.md');
  });

  it('rejects a command the CLI would reject (the check can fail)', async () => {
    expect(await parseError(['train', '--no-such-option'])).toMatch(/unknown option/);
    expect(await parseError(['serve', '--model', 'm', '--port', 'eighty'])).toMatch(/port/);
    expect(await parseError(['no-such-command'])).toMatch(/unknown command/);
    expect(await parseError(['inspect', '--json', '--', 'node', 'server.js'])).toBeNull();
  });

  it.each(PAGES)('%s: every mcprl command parses', async (page) => {
    const failures: string[] = [];
    for (const { line, text } of shellLines(read(page))) {
      for (const words of commands(text)) {
        const args = mcprlArgs(words);
        if (!args) continue;
        const error = await parseError(args);
        if (error) failures.push(`${page}:${line}: mcprl ${args.join(' ')}\n  ${error}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it.each(PAGES)('%s: every npm run names a script', (page) => {
    const scripts = Object.keys(JSON.parse(read('package.json')).scripts as Record<string, string>);
    const missing = shellLines(read(page)).flatMap((l) => commands(l.text))
      .filter((w) => w[0] === 'npm' && w[1] === 'run')
      .map((w) => w[2])
      .filter((s) => !scripts.includes(s));
    expect(missing).toEqual([]);
  });

  it.each(PAGES)('%s: every link to another page reaches it, and its #anchor a heading', (page) => {
    const broken: string[] = [];
    for (const m of read(page).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1];
      if (/^[a-z]+:/.test(target)) continue;
      const [file, anchor] = target.split('#');
      const resolved = file ? path.join(path.dirname(path.join(REPO_ROOT, page)), file) : path.join(REPO_ROOT, page);
      if (!existsSync(resolved)) {
        broken.push(`${target}: no such file`);
        continue;
      }
      if (anchor && resolved.endsWith('.md')) {
        const headings = readFileSync(resolved, 'utf8').split('\n').filter((l) => /^#{1,6} /.test(l)).map((l) => slug(l.replace(/^#+ /, '')));
        if (!headings.includes(anchor)) broken.push(`${target}: no heading with anchor #${anchor}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
