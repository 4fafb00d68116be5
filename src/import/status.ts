import type { RowStatus } from '../outcomes.js';
import { SUCCESS_STATUSES } from '../outcomes.js';
import type { ImportStore } from '../store/importStore.js';
import { SubsyncError } from '../errors.js';
import { readRunState, type RunState, type RunStatus } from './runState.js';

/** No import of this id in Redis: never created, or its record expired or was lost. */
export class ImportNotFoundError extends SubsyncError {
  readonly code = 'IMPORT_NOT_FOUND';
  constructor(
    readonly importId: string,
    message = `no import ${importId} in Redis (a finished import's data expires after SUBSYNC_RETENTION_DAYS; \`subsync status\` lists the imports it holds)`,
  ) {
    super(message);
  }
}

/** What `status`, `import --wait` and the dashboard show of one import. */
export interface ImportStatus {
  importId: string;
  file: string;
  kind: string;
  /** Rows in the file; undefined while the producer is still enqueuing. */
  total: number | undefined;
  counts: Record<RowStatus, number>;
  settledRows: number;
  /** Every row has an outcome. */
  settled: boolean;
  /** The results files are written (`resultsDir`). */
  finished: boolean;
  /** Rows created, updated, signed up or reconciled. */
  succeeded: number;
  /** Every row succeeded. */
  allSucceeded: boolean;
  createdAt: string;
  finishedAt: string | undefined;
  resultsDir: string | undefined;
  rowsPerSecond: number;
  apiCalls: number;
  /** Of apiCalls: searches, reads and writes. */
  searches: number;
  reads: number;
  writes: number;
  retries: number;
  rateLimited: number;
  /** Redis lost acknowledged writes while this import ran: since then its rows without an outcome read back before any create. */
  readBackSince: string | undefined;
  /** running, paused, cancelling or cancelled (src/import/runState.ts); running when not asked. */
  runState: RunState;
  /** Why it is paused or cancelled (a canary says what it found). */
  runReason: string | undefined;
  /** `import --canary N`: its rows, its bound, and whether the rest is still held back. */
  canary: { rows: number; maxFailures: number; holding: boolean } | undefined;
}

export async function importStatus(store: ImportStore, importId: string, now = Date.now()): Promise<ImportStatus | undefined> {
  const record = await store.getImport(importId);
  if (!record) return undefined;
  const counts = await store.counts(importId);
  const run: RunStatus = await readRunState(store.redis, store.keys, importId);
  const settled = record.total !== undefined && counts.settled >= record.total;
  const succeeded = Object.entries(counts.byStatus).reduce((sum, [status, n]) => (SUCCESS_STATUSES.has(status as RowStatus) ? sum + n : sum), 0);
  const end = settled ? (record.lastSettledAt ?? now) : now;
  const seconds = Math.max(0.001, (end - record.createdAt) / 1000);
  return {
    importId,
    file: record.file,
    kind: record.kind,
    total: record.total,
    counts: counts.byStatus,
    settledRows: counts.settled,
    settled,
    finished: record.finishedAt !== undefined,
    succeeded,
    allSucceeded: settled && succeeded === record.total,
    createdAt: new Date(record.createdAt).toISOString(),
    finishedAt: record.finishedAt === undefined ? undefined : new Date(record.finishedAt).toISOString(),
    resultsDir: record.resultsDir,
    rowsPerSecond: Math.round((counts.settled / seconds) * 10) / 10,
    apiCalls: counts.apiCalls,
    searches: counts.searches,
    reads: counts.reads,
    writes: counts.apiCalls - counts.searches - counts.reads,
    retries: counts.retries,
    rateLimited: counts.rateLimited,
    readBackSince: record.readBack === undefined ? undefined : new Date(record.readBack).toISOString(),
    runState: run.state,
    runReason: run.reason,
    canary: run.canaryRows === undefined ? undefined : { rows: run.canaryRows, maxFailures: run.canaryMaxFailures ?? 0, holding: run.holdFrom !== undefined },
  };
}
