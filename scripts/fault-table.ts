/**
 * Runs the fault suite (test/faults) and prints its table: fault, expected outcome, observed outcome, and whether
 * the test held. Exit status: vitest's (non-zero when any row does not hold).
 *
 *   node --import tsx scripts/fault-table.ts [vitest filters…]
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { FaultRow } from '../test/faults/fault-table.js';

interface JsonReport {
  testResults: { assertionResults: { ancestorTitles: string[]; title: string; status: string }[] }[];
}

const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-faults-'));
const rowsFile = path.join(dir, 'rows.jsonl');
const reportFile = path.join(dir, 'report.json');
const filters = process.argv.slice(2);
const r = spawnSync('npx', ['vitest', 'run', ...(filters.length ? filters : ['test/faults']), '--reporter=default', '--reporter=json', `--outputFile.json=${reportFile}`], {
  stdio: ['ignore', 'inherit', 'inherit'],
  env: { ...process.env, MCPRL_FAULT_TABLE: rowsFile },
});
const rows: FaultRow[] = existsSync(rowsFile) ? readFileSync(rowsFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as FaultRow) : [];
const report = existsSync(reportFile) ? (JSON.parse(readFileSync(reportFile, 'utf8')) as JsonReport) : { testResults: [] };
rmSync(dir, { recursive: true, force: true });

const table: string[][] = [];
for (const file of report.testResults) {
  for (const t of file.assertionResults) {
    const name = [...t.ancestorTitles, t.title].join(' > ');
    const held = t.status === 'passed' ? 'holds' : t.status;
    const own = rows.filter((x) => x.test === name);
    if (own.length === 0) table.push([t.title, '(see the test)', t.status === 'passed' ? 'as expected' : '—', held]);
    for (const x of own) table.push([x.fault, x.expected, x.observed, held]);
  }
}
const head = ['fault', 'expected', 'observed', 'result'];
const widths = head.map((h, i) => Math.min(70, Math.max(h.length, ...table.map((row) => row[i].length))));
const line = (cells: string[]) => '| ' + cells.map((c, i) => (c.length > widths[i] ? c.slice(0, widths[i] - 1) + '…' : c.padEnd(widths[i]))).join(' | ') + ' |';
process.stdout.write('\n' + [line(head), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...table.map(line)].join('\n') + '\n');
process.exitCode = r.status ?? 1;
