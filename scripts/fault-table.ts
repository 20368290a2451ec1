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
  testResults: { name: string; assertionResults: { ancestorTitles: string[]; title: string; status: string }[] }[];
}

const dir = mkdtempSync(path.join(tmpdir(), 'mcprl-faults-'));
const rowsFile = path.join(dir, 'rows.jsonl');
const reportFile = path.join(dir, 'report.json');
// The fault suite, and the files whose tests cover the faults that already held when the pass was made (judge
// answers, MCP servers that crash, hang, flood or speak garbage, corrupt model and adapter folders, malformed HTTP,
// traversal and token attacks on `mcprl mcp`).
const SUITE = ['test/faults', 'test/ruler-judge.test.ts', 'test/mcp-robustness.test.ts', 'test/engine-load-errors.test.ts', 'test/serve-openai.test.ts', 'test/mcp-server-safety.test.ts'];
const filters = process.argv.slice(2);
const r = spawnSync('npx', ['vitest', 'run', ...(filters.length ? filters : SUITE), '--reporter=default', '--reporter=json', `--outputFile.json=${reportFile}`], {
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
    // Outside test/faults only the tests that record a fault are rows; the others there are ordinary tests.
    const inSuite = file.name.includes(`${path.sep}test${path.sep}faults${path.sep}`);
    if (own.length === 0 && (inSuite || t.status !== 'passed')) table.push([t.title, '(see the test)', t.status === 'passed' ? 'as expected' : '—', held]);
    for (const x of own) table.push([x.fault, x.expected, x.observed, held]);
  }
}
const head = ['fault', 'expected', 'observed', 'result'];
const widths = head.map((h, i) => Math.min(70, Math.max(h.length, ...table.map((row) => row[i].length))));
const line = (cells: string[]) => '| ' + cells.map((c, i) => (c.length > widths[i] ? c.slice(0, widths[i] - 1) + '…' : c.padEnd(widths[i]))).join(' | ') + ' |';
process.stdout.write('\n' + [line(head), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...table.map(line)].join('\n') + '\n');
process.exitCode = r.status ?? 1;
