import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'scripts/**/*.test.ts'],
    // Timeouts are safety nets against a hang, not performance checks: loading models and starting servers
    // takes several times longer on a loaded two-core machine, and a test must not fail for that.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    // Two cores: keep the number of concurrently running test files small so that
    // server processes and native work do not starve each other.
    maxWorkers: 2,
  },
});
