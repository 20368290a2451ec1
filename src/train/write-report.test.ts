import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RunDir } from './run-dir.js';
import { writeRunReport } from './write-report.js';

let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('writeRunReport', () => {
  it('marks the step state.json selected and plots the test figures of metrics.jsonl on the validation curve', async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'mcprl-report-'));
    const run = new RunDir(dir);
    await run.commit({ step: 4, bestStep: 2, bestValSuccess: 0.5, evalsWithoutImprovement: 1, stopped: 'max_steps' });
    const rows = [
      { step: 0, val_success: 0.1, test_success: 0.125 },
      { step: 2, val_success: 0.5 },
      { step: 4, val_success: 0.375, test_success: 0.25, test_success_best: 0.375, best_step: 2 },
    ];
    writeFileSync(run.path('metrics.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const { report } = await writeRunReport(run);
    const html = readFileSync(report, 'utf8');
    const chart = html.split('<svg').find((s) => s.includes('aria-label="Validation and test success"'));
    expect(chart).toBeDefined();
    expect(chart).toContain('>selected: step 2</text>');
    expect([...chart!.matchAll(/<title>(test, step \d+: [\d.]+%)<\/title>/g)].map((m) => m[1])).toEqual(['test, step 0: 12.5%', 'test, step 2: 37.5%', 'test, step 4: 25.0%']);
  });
});
