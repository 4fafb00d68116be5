import type { ImportStatus } from '../../src/import/status.js';

export type { ImportStatus };

/** An unfinished import's status with no rows settled, for tests of how it is shown. */
export const NO_SCHEDULE_FIELDS: ImportStatus = {
  importId: 'abc',
  file: 'f.csv',
  kind: 'customers',
  total: undefined,
  counts: {} as ImportStatus['counts'],
  settledRows: 0,
  settled: false,
  finished: false,
  succeeded: 0,
  allSucceeded: false,
  createdAt: '2026-11-24T00:00:00.000Z',
  finishedAt: undefined,
  resultsDir: undefined,
  rowsPerSecond: 0,
  apiCalls: 0,
  searches: 0,
  reads: 0,
  writes: 0,
  retries: 0,
  rateLimited: 0,
  runState: 'running',
  runReason: undefined,
  canary: undefined,
};
