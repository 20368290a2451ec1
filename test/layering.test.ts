/**
 * Layering: the folders of src/ form a pipeline, and no import runs back up it. A module may import from
 * its own folder and from folders lower in LAYERS, never from a higher one. src/index.ts (the package's
 * public face) sits above every layer.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './helpers/servers.js';

/**
 * The order of src/'s folders, lowest first; this list is the one place it is written down.
 *   util        atomic writes, progress, seeded randomness (no imports from any other layer)
 *   hf          Hugging Face formats: safetensors, config.json, PEFT adapters
 *   engine      the native binding, the model and its generation scheduler, the trainer API
 *   chat        tokenizer, chat template, tool-call parsing, the typed chat core over the engine
 *   mcp         connecting to MCP servers, listing and calling their tools
 *   scenarios   AutoRL: tasks for a server
 *   agent       the rollout loop and its policies → trajectories
 *   ruler       the judge and the verifiable checks → rewards
 *   eval        groups of rollouts, scored
 *   train       GRPO on a LoRA adapter
 *   export      merged models, ONNX
 *   serve       the OpenAI-compatible HTTP server
 *   backend     the library: TrainableModel, Local/RemoteBackend, trajectories and groups, the training server
 *   mcp-rl      the MCP·RL training job (`mcprl train`): its loop, a client of the library
 *   mcp-server  mcprl itself as an MCP server
 *   cli         one file per command
 */
export const LAYERS = [
  'util',
  'hf',
  'engine',
  'chat',
  'mcp',
  'scenarios',
  'agent',
  'ruler',
  'eval',
  'train',
  'export',
  'serve',
  'backend',
  'mcp-rl',
  'mcp-server',
  'cli',
] as const;

/** Known back-imports, each with the reason it is still there. Keep this list empty: an entry is a debt. */
const ALLOWED: ReadonlySet<string> = new Set<string>([]);

export interface BackImport {
  from: string;
  to: string;
  fromLayer: string;
  toLayer: string;
}

/** The layer of a repo-relative path under src/ (its first folder), or null for src/'s own root files. */
function layerOf(file: string): string | null {
  const parts = file.split('/');
  return parts[0] === 'src' && parts.length > 2 ? parts[1] : null;
}

/** Every relative module a TypeScript source imports (static, dynamic and re-exports), repo-relative. */
export function importsOf(file: string, source: string): string[] {
  const info = ts.preProcessFile(source, true, true);
  return info.importedFiles
    .map((f) => f.fileName)
    .filter((spec) => spec.startsWith('./') || spec.startsWith('../'))
    .map((spec) => path.posix.normalize(path.posix.join(path.posix.dirname(file), spec)).replace(/\.js$/, '.ts'));
}

/**
 * The imports that run back up the pipeline: from a file in one layer to a file in a higher layer. A folder
 * missing from `layers` is an error too, so a new folder has to be placed in the order before it is used.
 */
export function findBackImports(files: { file: string; source: string }[], layers: readonly string[]): BackImport[] {
  const rank = new Map(layers.map((l, i) => [l, i]));
  const rankOf = (file: string, layer: string): number => {
    const r = rank.get(layer);
    if (r === undefined) throw new Error(`${file}: folder src/${layer} is not in LAYERS`);
    return r;
  };
  const out: BackImport[] = [];
  for (const { file, source } of files) {
    const fromLayer = layerOf(file);
    if (fromLayer === null) continue;
    const fromRank = rankOf(file, fromLayer);
    for (const to of importsOf(file, source)) {
      const toLayer = layerOf(to);
      if (toLayer === null) {
        // Only src/index.ts sits above the layers; nothing inside them may import it or leave src/.
        if (to.startsWith('src/')) out.push({ from: file, to, fromLayer, toLayer: 'src' });
        else out.push({ from: file, to, fromLayer, toLayer: 'outside src' });
        continue;
      }
      if (rankOf(to, toLayer) > fromRank) out.push({ from: file, to, fromLayer, toLayer });
    }
  }
  return out;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(path.join(REPO_ROOT, dir), { withFileTypes: true })) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) out.push(...sourceFiles(rel));
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

describe('layering', () => {
  it('no module under src/ imports from a higher layer', () => {
    // Tests beside the code are held to their folder's layer too; they may also use the helpers in test/ and
    // scripts/ (random models), which the package never ships.
    const files = sourceFiles('src').map((file) => ({ file, source: readFileSync(path.join(REPO_ROOT, file), 'utf8') }));
    const helper = (b: BackImport) => b.from.endsWith('.test.ts') && (b.to.startsWith('test/') || b.to.startsWith('scripts/'));
    const back = findBackImports(files, LAYERS)
      .filter((b) => !helper(b))
      .map((b) => `${b.from} -> ${b.to}`)
      .filter((b) => !ALLOWED.has(b));
    expect(back).toEqual([]);
  });

  it('every folder of src/ has its place in LAYERS', () => {
    const folders = readdirSync(path.join(REPO_ROOT, 'src'), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
    expect(folders).toEqual([...LAYERS].sort());
  });

  it('the checker reports an import from a lower layer to a higher one, and only that', () => {
    const files = [
      { file: 'src/agent/rollout.ts', source: "import { x } from '../ruler/judge.js';\nimport { y } from '../mcp/index.js';" },
      { file: 'src/ruler/judge.ts', source: "export { z } from '../agent/trajectory.js';\nimport './prompt.js';" },
      { file: 'src/mcp/session.ts', source: "const m = await import('../cli/main.js');" },
      { file: 'src/index.ts', source: "export { buildProgram } from './cli/main.js';" },
    ];
    expect(findBackImports(files, LAYERS).map((b) => `${b.from} -> ${b.to}`)).toEqual([
      'src/agent/rollout.ts -> src/ruler/judge.ts',
      'src/mcp/session.ts -> src/cli/main.ts',
    ]);
  });

  it('the checker refuses a folder that has no place in the order', () => {
    expect(() => findBackImports([{ file: 'src/misc/a.ts', source: '' }], LAYERS)).toThrow(/src\/misc is not in LAYERS/);
  });
});
