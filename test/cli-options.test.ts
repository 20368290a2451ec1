/**
 * Every option a command accepts has an effect (issue 12 §5: `mcprl eval --timeout` was accepted and ignored).
 * This walks every command of the real program (buildProgram) and every option it declares, and checks that the
 * command's code path reads the option's value: the action's options object, followed into the functions it is
 * passed to (in the command's file and in target-options.ts), read with the TypeScript compiler's syntax tree.
 * Options derived from a settings schema are consumed through `valuesFromOptions(Schema, …)`; then each field of
 * that schema must be read by the code the settings go to (src/train for the training settings).
 *
 * An option that is declared and never read fails here, naming the command and the option. A read that does
 * nothing with the value cannot be seen this way; the behaviour tests (test/faults/papercuts.test.ts, …) cover those.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../src/cli/main.js';
import { kebabCase } from '../src/cli/schema-options.js';
import { TrainSettingsSchema } from '../src/train/config.js';
import { REPO_ROOT } from './helpers/servers.js';

const CLI = path.join(REPO_ROOT, 'src', 'cli');
/** The schemas a command may derive options from, by the name it passes to valuesFromOptions. */
const SCHEMAS = { TrainSettingsSchema } as const;

const parsed = new Map<string, ts.SourceFile>();
function source(file: string): ts.SourceFile {
  let sf = parsed.get(file);
  if (!sf) parsed.set(file, (sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true)));
  return sf;
}

function walk(node: ts.Node, visit: (n: ts.Node) => void): void {
  visit(node);
  node.forEachChild((c) => walk(c, visit));
}

type Fn = ts.FunctionDeclaration | ts.ArrowFunction | ts.FunctionExpression | ts.MethodDeclaration;

/** Functions declared by name in `files` (the command's own helpers, and the shared target options). */
function functionsByName(files: string[]): Map<string, Fn> {
  const out = new Map<string, Fn>();
  for (const f of files) {
    walk(source(f), (n) => {
      if (ts.isFunctionDeclaration(n) && n.name) out.set(n.name.text, n);
    });
  }
  return out;
}

/**
 * The option names `fn` reads from its parameter `param`: `param.x`, `const { x } = param`, `param.x ??= …`, and
 * whatever the functions it passes `param` to read from theirs (found by name in `known`).
 */
function reads(fn: Fn, param: string, known: Map<string, Fn>, seen = new Set<Fn>()): Set<string> {
  const out = new Set<string>();
  if (seen.has(fn) || !fn.body) return out;
  seen.add(fn);
  walk(fn.body, (n) => {
    if (ts.isPropertyAccessExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === param) out.add(n.name.text);
    if (ts.isVariableDeclaration(n) && ts.isObjectBindingPattern(n.name) && n.initializer && ts.isIdentifier(n.initializer) && n.initializer.text === param) {
      for (const el of n.name.elements) out.add(((el.propertyName ?? el.name) as ts.Identifier).text);
    }
    if (ts.isCallExpression(n) && ts.isIdentifier(n.expression)) {
      const callee = known.get(n.expression.text);
      n.arguments.forEach((a, i) => {
        const p = callee?.parameters[i];
        if (callee && p && ts.isIdentifier(a) && a.text === param && ts.isIdentifier(p.name)) for (const r of reads(callee, p.name.text, known, seen)) out.add(r);
      });
    }
  });
  return out;
}

/** The callback given to `.action(…)` in `file`, and the name of its options parameter (its last). */
function actionOf(file: string): { fn: Fn; param: string } {
  let found: { fn: Fn; param: string } | undefined;
  walk(source(file), (n) => {
    if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression) && n.expression.name.text === 'action') {
      const fn = n.arguments[0];
      if (fn && (ts.isArrowFunction(fn) || ts.isFunctionExpression(fn))) {
        const last = fn.parameters.at(-1)!;
        if (ts.isIdentifier(last.name)) found = { fn, param: last.name.text };
      }
    }
  });
  if (!found) throw new Error(`${file}: no .action(…) callback found`);
  return found;
}

/** The schemas whose fields `file` consumes through valuesFromOptions(Schema, …). */
function schemasConsumed(file: string): (keyof typeof SCHEMAS)[] {
  const out: (keyof typeof SCHEMAS)[] = [];
  walk(source(file), (n) => {
    if (ts.isCallExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'valuesFromOptions' && ts.isIdentifier(n.arguments[0])) {
      const name = n.arguments[0].text;
      if (!(name in SCHEMAS)) throw new Error(`${file}: valuesFromOptions(${name}) — add ${name} to this test's SCHEMAS`);
      out.push(name as keyof typeof SCHEMAS);
    }
  });
  return out;
}

/** Every command that runs something (has an action), with the file that registers it (src/cli/<name>.ts). */
function commands(program: Command): { name: string; cmd: Command; file: string }[] {
  return program.commands.map((cmd) => ({ name: cmd.name(), cmd, file: path.join(CLI, `${cmd.name()}.ts`) }));
}

/** The options of `cmd` that its code path never reads, as `--flag (attribute)`. */
function unread(cmd: Command, file: string): string[] {
  const known = functionsByName([file, path.join(CLI, 'target-options.ts')]);
  const { fn, param } = actionOf(file);
  const read = reads(fn, param, known);
  for (const s of schemasConsumed(file)) for (const key of Object.keys(SCHEMAS[s].shape)) read.add(key);
  return cmd.options.filter((o) => !read.has(o.attributeName())).map((o) => `${o.long} (${o.attributeName()})`);
}

describe('every option of every command is read by the command', () => {
  const program = buildProgram();

  it('walks the whole program: one register file per command, each with an action', () => {
    const names = commands(program).map((c) => c.name);
    expect(names).toEqual(expect.arrayContaining(['inspect', 'scenarios', 'export', 'eval', 'serve', 'train', 'report', 'mcp', 'backend']));
    const files = readdirSync(CLI).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));
    for (const c of commands(program)) expect(files, c.name).toContain(`${c.name}.ts`);
  });

  for (const { name, cmd, file } of commands(buildProgram())) {
    it(`mcprl ${name}: ${cmd.options.length} options, each read`, () => {
      expect(cmd.options.length).toBeGreaterThan(0);
      expect(unread(cmd, file), `mcprl ${name} declares options its code never reads`).toEqual([]);
    });
  }

  it('every training setting (the train options derived from the schema) is read by the training code', () => {
    // The training job's loop (src/mcp-rl) and the parts of training it uses (src/train).
    const text = ['train', 'mcp-rl']
      .flatMap((folder) => {
        const dir = path.join(REPO_ROOT, 'src', folder);
        return readdirSync(dir).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && f !== 'config.ts').map((f) => path.join(dir, f));
      })
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n');
    const ignored = Object.keys(TrainSettingsSchema.shape).filter((k) => !new RegExp(`\\.${k}\\b`).test(text));
    expect(ignored.map((k) => `--${kebabCase(k)}`), 'training settings that src/train and src/mcp-rl never read').toEqual([]);
  });

  it('can fail: an option added to a command and never read is reported', () => {
    const program = buildProgram();
    const evalCmd = program.commands.find((c) => c.name() === 'eval')!;
    evalCmd.option('--ignored-by-eval <n>', 'an option nobody reads');
    expect(unread(evalCmd, path.join(CLI, 'eval.ts'))).toEqual(['--ignored-by-eval (ignoredByEval)']);
  });
});
