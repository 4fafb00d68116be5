import type { RowStatus } from '../outcomes.js';
import { SUCCESS_STATUSES } from '../outcomes.js';
import type { ImportStore } from '../store/importStore.js';
import type { RedisClient } from '../redis/redis.js';
import { importSchedule, type ImportSchedule } from '../queue/feeder.js';
import { SubsyncError } from '../errors.js';
import { readRunState, type RunState } from './runState.js';
import { apiFiguresOf, type ApiFigures } from '../results/writeResults.js';

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
export interface ImportStatus extends ApiFigures {
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
  /** Redis lost acknowledged writes while this import ran: since then its rows without an outcome read back before any create. */
  readBackSince?: string;
  /**
   * Its turn at the budget while rows remain (with `feed` given): its place
   * among the imports waiting for their turn, its share and the rate it
   * actually gets, and the ETA at that rate.
   */
  schedule?: ImportScheduleView;
  /** running, paused, cancelling or cancelled (src/import/runState.ts); running when not asked. */
  runState: RunState;
  /** Why it is paused or cancelled (a canary says what it found). */
  runReason: string | undefined;
  /** `import --canary N`: its rows, its bound, and whether the rest is still held back. */
  canary: { rows: number; maxFailures: number; holding: boolean } | undefined;
}

/** An unfinished import's turn at the fleet's budget (src/queue/feeder.ts). */
export interface ImportScheduleView extends ImportSchedule {
  /** Rows it has not released yet wait for its turn. */
  waiting: boolean;
  /** Seconds until every row has settled at the rate it gets (or, before that is measured, at its share of the pace); undefined when unknown. */
  etaSeconds: number | undefined;
}

/** Where the feeder keeps the imports' turn, and the pace, for {@link importStatus}'s schedule. */
export interface FeedView {
  redis: RedisClient;
  prefix: string;
  /** SUBSYNC_RATE, for an ETA before any rate is measured. */
  rate?: number;
}

export async function importStatus(store: ImportStore, importId: string, now = Date.now(), feed?: FeedView): Promise<ImportStatus | undefined> {
  // Sent together, in this order, so one round trip answers them: `import --wait` and the dashboard ask often.
  const [record, counts, run] = await Promise.all([store.getImport(importId), store.counts(importId), readRunState(store.redis, store.keys, importId)]);
  if (!record) return undefined;
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
    ...apiFiguresOf(counts),
    readBackSince: record.readBack === undefined ? undefined : new Date(record.readBack).toISOString(),
    ...(feed && record.finishedAt === undefined && !settled ? { schedule: await scheduleOf(feed, importId, record.total, counts.settled) } : {}),
    runState: run.state,
    runReason: run.reason,
    canary: run.canaryRows === undefined ? undefined : { rows: run.canaryRows, maxFailures: run.canaryMaxFailures ?? 0, holding: run.holdFrom !== undefined },
  };
}

async function scheduleOf(feed: FeedView, importId: string, total: number | undefined, settledRows: number): Promise<ImportScheduleView> {
  const schedule = await importSchedule(feed.redis, feed.prefix, importId);
  const remaining = total === undefined ? undefined : Math.max(0, total - settledRows);
  // The rate it gets; before it is measured, its share of the pace.
  const rate = schedule.rowsPerSecond !== undefined && schedule.rowsPerSecond > 0 ? schedule.rowsPerSecond : feed.rate ? feed.rate * schedule.weightShare : undefined;
  return {
    ...schedule,
    waiting: schedule.backlogRows > 0,
    etaSeconds: remaining === undefined || rate === undefined || rate <= 0 ? undefined : remaining === 0 ? 0 : Math.max(1, Math.round(remaining / rate)),
  };
}

/** `  place 2 of 3 sharing the budget, share 33%` while other imports wait for their turn too (its share: of the rows the running imports settle lately; priority named when not normal); else empty. */
export function turnText(status: ImportStatus): string {
  const schedule = status.schedule;
  if (!schedule || schedule.place === undefined || schedule.sharing < 2) return '';
  const share = schedule.share ?? schedule.weightShare;
  const priority = schedule.priority === 'normal' ? '' : `, ${schedule.priority} priority`;
  return `  place ${schedule.place} of ${schedule.sharing} sharing the budget${priority}, share ${Math.round(share * 100)}%`;
}

/** Seconds for a person: `45s`, `5m05s`, `2h03m`. */
export function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m}m${String(seconds % 60).padStart(2, '0')}s` : `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}
