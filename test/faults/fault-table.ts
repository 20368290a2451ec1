/**
 * The fault suite's table (issue 12): each fault test records the fault it injects, the outcome it expects and the
 * outcome it observed, once its assertions have held. `scripts/fault-table.ts` runs test/faults with
 * MCPRL_FAULT_TABLE naming a file and prints the rows beside each test's pass/fail; without the variable,
 * recording does nothing.
 */
import { appendFileSync } from 'node:fs';
import { expect } from 'vitest';

export interface FaultRow {
  test: string;
  fault: string;
  expected: string;
  observed: string;
}

export function fault(name: string, expected: string, observed: string): void {
  const file = process.env.MCPRL_FAULT_TABLE;
  if (!file) return;
  const row: FaultRow = { test: expect.getState().currentTestName ?? '', fault: name, expected, observed };
  appendFileSync(file, JSON.stringify(row) + '\n');
}
