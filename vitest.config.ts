import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The fault test runs on its own (`npm run test:chaos`, also run by .ci/run).
    exclude: ['test/chaos/**', 'node_modules/**'],
    environment: 'node',
    // Tests use real Redis and real HTTP servers: generous, but bounded.
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Separate processes: signal handlers, servers and Redis connections of one
    // test file cannot leak into another.
    pool: 'forks',
    // Unhandled errors fail the run (vitest's default; stated so nobody turns it off).
    dangerouslyIgnoreUnhandledErrors: false,
  },
});
