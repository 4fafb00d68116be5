import { defineConfig } from 'vitest/config';

/** `npm run test:chaos`: the fault test alone, bounded to three minutes. */
export default defineConfig({
  test: {
    include: ['test/chaos/**/*.test.ts'],
    environment: 'node',
    testTimeout: 180_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
