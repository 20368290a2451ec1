/**
 * Minimal progress bars on stderr: redrawn in place on a terminal, one line per 25 % otherwise (logs and CI
 * stay readable). Silent when `enabled` is false.
 */
export class Progress {
  private lastQuarter = -1;
  private readonly started = Date.now();

  constructor(private readonly label: string, private readonly total: number, private readonly enabled = true) {}

  update(done: number, note = ''): void {
    if (!this.enabled || this.total <= 0) return;
    const frac = Math.min(1, done / this.total);
    const secs = ((Date.now() - this.started) / 1000).toFixed(1);
    if (process.stderr.isTTY) {
      const width = 24;
      const filled = Math.round(frac * width);
      process.stderr.write(`\r${this.label.padEnd(9)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${this.total} ${secs}s ${note}`.padEnd(90));
      if (done >= this.total) process.stderr.write('\n');
      return;
    }
    const quarter = Math.floor(frac * 4);
    if (quarter > this.lastQuarter) {
      this.lastQuarter = quarter;
      process.stderr.write(`${this.label} ${done}/${this.total} (${Math.round(frac * 100)}%) ${secs}s ${note}\n`);
    }
  }
}
