import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'scripts/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Two cores: keep the number of concurrently running test files small so that
    // server processes and native work do not starve each other.
    maxWorkers: 2,
  },
});
