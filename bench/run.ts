/**
 * `npm run bench`: runs every bench/*.bench.ts in turn (or only those whose file name contains one of the
 * command-line arguments) and prints one JSON object per line: {"name", "value", "unit"}.
 *
 * A bench file default-exports `async (emit: Emit) => void` and calls emit(name, value, unit) per figure;
 * a file without a default export is run for its side effects (it prints its own JSON lines on import).
 */
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export type Emit = (name: string, value: number, unit: string) => void;
export type Bench = (emit: Emit) => Promise<void>;

const here = dirname(fileURLToPath(import.meta.url));
const filters = process.argv.slice(2);
const files = readdirSync(here)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
const emit: Emit = (name, value, unit) => {
  process.stdout.write(`${JSON.stringify({ name, value: Number(value.toPrecision(4)), unit })}\n`);
};
for (const f of files) {
  const mod = (await import(pathToFileURL(join(here, f)).href)) as { default?: Bench };
  if (typeof mod.default === 'function') await mod.default(emit);
}
