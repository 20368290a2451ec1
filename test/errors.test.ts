import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ExportError } from '../src/export/errors.js';
import { McpConnectError } from '../src/mcp/errors.js';
import { McprlError } from '../src/util/errors.js';
import { REPO_ROOT } from './helpers/servers.js';

describe('McprlError', () => {
  it('carries a code and the name of the class thrown, and subclasses are McprlErrors', () => {
    const base = new McprlError('RUN_DIR', 'state.json: step: expected a number');
    expect(base).toMatchObject({ code: 'RUN_DIR', name: 'McprlError', message: 'state.json: step: expected a number' });
    const cause = new Error('ECONNREFUSED');
    const sub = new McpConnectError('UNREACHABLE', 'nothing answered', { cause });
    expect(sub).toBeInstanceOf(McprlError);
    expect(sub).toMatchObject({ code: 'UNREACHABLE', name: 'McpConnectError', cause });
    expect(new ExportError('MISSING_FILE', 'x').name).toBe('ExportError');
  });
});

describe('error subclasses', () => {
  // A subclass earns its place when some caller branches on it (instanceof outside its own file) or it carries
  // fields a caller reads; every other failure is a McprlError told apart by its code.
  const withFields: Record<string, string> = {
    WriteError: 'file and errno (writeDirAtomic renames the file to the folder it was for)',
    GatherError: 'the groups completed before the failures ran out, and the failures',
  };

  it('exist only where a caller branches on them or reads their fields', () => {
    const files = readdirSync(join(REPO_ROOT, 'src'), { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
      .map((f) => ({ file: join('src', f), text: readFileSync(join(REPO_ROOT, 'src', f), 'utf8') }));
    const unbranched: string[] = [];
    for (const { file, text } of files) {
      for (const [, name] of text.matchAll(/class (\w+) extends (?:McprlError|\w+Error)\b/g)) {
        if (name === 'McprlError' || withFields[name]) continue;
        const branched = files.some((o) => o.file !== file && new RegExp(`instanceof ${name}\\b`).test(o.text));
        if (!branched) unbranched.push(`${name} (${file})`);
      }
    }
    expect(unbranched).toEqual([]);
  });

  it('keeps the old names of those that became codes importable', async () => {
    const lib = await import('../src/index.js');
    for (const name of ['TrainError', 'TokenizerError', 'TokenizeError', 'RolloutPoolError', 'TracingError', 'OverlappingScenariosError'] as const) {
      expect(lib[name]).toBe(McprlError);
    }
  });
});
