/**
 * The run history: every import Redis still holds (within retention), newest
 * first, with its state, counts by outcome, rows/s and, while it runs, an
 * ETA. What `subsync history` prints and the dashboard's History page shows.
 *
 * Read page by page from the index of imports by time (a sorted set), each
 * page's records and counts in one pipelined read: a page costs the same
 * with ten imports or ten thousand. A filter by state reads on, page by
 * page, until it has its rows.
 *
 * States:
 * - `queued`: nothing settled and no request made yet;
 * - `running`: rows are being enqueued or sent, or the results written;
 * - `paused`, `cancelled`: as an operator (or a canary) left it, read from
 *   the import's run state (`<prefix>:import:<id>:run`); a cancelling import
 *   is shown cancelled;
 * - `finished`: its results are written and every row succeeded;
 * - `finished with failures`: its results are written and some rows are
 *   invalid, failed or need review.
 */
import { PROBLEM_STATUSES, ROW_STATUSES, SUCCESS_STATUSES, type RowStatus } from '../outcomes.js';
import type { ImportCounts, ImportStore } from '../store/importStore.js';
import { seriesPoints, type SeriesPoint } from '../store/series.js';

export const IMPORT_STATES = ['queued', 'running', 'paused', 'cancelled', 'finished', 'finished with failures'] as const;
export type ImportState = (typeof IMPORT_STATES)[number];

export const isImportState = (value: string): value is ImportState => (IMPORT_STATES as readonly string[]).includes(value);

/** One import as the history lists it. */
export interface HistoryEntry {
  importId: string;
  file: string;
  kind: string;
  state: ImportState;
  createdAt: string;
  finishedAt: string | null;
  /** Rows in the file; null while the producer is still enqueuing. */
  total: number | null;
  settled: number;
  /** Counts by outcome (every outcome, zeros included). */
  counts: Record<RowStatus, number>;
  succeeded: number;
  /** Invalid, failed and needs-review rows. */
  problems: number;
  /** Rows settled per second from the start to the last settle (to now while running). */
  rowsPerSecond: number;
  /** While running: seconds until every row is settled at the recent pace; null otherwise or when unknown. */
  etaSeconds: number | null;
  apiCalls: number;
  rateLimited: number;
}

export interface HistoryQuery {
  /** Imports to return (default 50). */
  limit?: number;
  /** Imports to skip first (of those the filter keeps). */
  offset?: number;
  state?: ImportState;
  now?: number;
}

export interface HistoryPage {
  imports: HistoryEntry[];
  /** Imports in the index (expired ones not yet dropped included): the size of the unfiltered history. */
  indexed: number;
  /** The offset of the next page; null when this page is the last. */
  nextOffset: number | null;
}

/** Imports read per pipelined round trip. */
const READ_CHUNK = 200;
/** The pace an ETA uses: rows settled over this many seconds before the last bucket. */
const ETA_WINDOW_S = 60;

/** An import's state from its record's fields (and `runState`, its run-state hash's state) and its counts (see the module comment). */
export function stateOf(record: Readonly<Record<string, string | undefined>>, counts: ImportCounts): ImportState {
  // Cancelling: its unsent rows are being settled as cancelled.
  if (record.runState === 'cancelled' || record.runState === 'cancelling') return 'cancelled';
  if (record.finishedAt !== undefined) {
    const problems = [...PROBLEM_STATUSES].reduce((sum, s) => sum + counts.byStatus[s], 0);
    return problems > 0 ? 'finished with failures' : 'finished';
  }
  if (record.runState === 'paused') return 'paused';
  if (counts.settled === 0 && counts.apiCalls === 0) return 'queued';
  return 'running';
}

const numberOf = (text: string | undefined): number | undefined => {
  const n = text === undefined || text === '' ? Number.NaN : Number(text);
  return Number.isFinite(n) ? n : undefined;
};
const iso = (ms: number | undefined): string | null => (ms === undefined ? null : new Date(ms).toISOString());
const round1 = (n: number): number => Math.round(n * 10) / 10;

/** The history entry of one import from its summary (no series: no ETA). */
export function historyEntry(importId: string, record: Readonly<Record<string, string | undefined>>, counts: ImportCounts, now: number): HistoryEntry {
  const createdAt = numberOf(record.createdAt) ?? now;
  const total = numberOf(record.total);
  const state = stateOf(record, counts);
  const succeeded = ROW_STATUSES.reduce((sum, s) => (SUCCESS_STATUSES.has(s) ? sum + counts.byStatus[s] : sum), 0);
  const problems = [...PROBLEM_STATUSES].reduce((sum, s) => sum + counts.byStatus[s], 0);
  const settledAll = total !== undefined && counts.settled >= total;
  const end = settledAll || state === 'paused' || state === 'cancelled' ? (numberOf(record.lastSettledAt) ?? now) : now;
  const seconds = Math.max(0.001, (end - createdAt) / 1000);
  return {
    importId,
    file: record.file ?? '',
    kind: record.kind ?? '',
    state,
    createdAt: new Date(createdAt).toISOString(),
    finishedAt: iso(numberOf(record.finishedAt)),
    total: total ?? null,
    settled: counts.settled,
    counts: counts.byStatus,
    succeeded,
    problems,
    rowsPerSecond: round1(counts.settled / seconds),
    etaSeconds: null,
    apiCalls: counts.apiCalls,
    rateLimited: counts.rateLimited,
  };
}

/**
 * Seconds until a running import has settled every row, at the pace of its
 * last minute of activity (its series), else at its pace so far; null when
 * nothing has settled yet or the total is not known.
 */
export function etaOf(entry: Pick<HistoryEntry, 'total' | 'settled' | 'rowsPerSecond' | 'createdAt'>, points: readonly SeriesPoint[], now: number): number | null {
  if (entry.total === null) return null;
  const left = entry.total - entry.settled;
  if (left <= 0) return 0;
  const age = (now - Date.parse(entry.createdAt)) / 1000;
  const since = age - ETA_WINDOW_S;
  let rows = 0;
  let from = Number.POSITIVE_INFINITY;
  for (const p of points) {
    if (p.at + p.width <= since) continue;
    rows += p.rows;
    from = Math.min(from, p.at);
  }
  const window = Number.isFinite(from) ? Math.max(1, age - from) : 0;
  const pace = rows > 0 ? rows / window : entry.rowsPerSecond;
  return pace > 0 ? Math.ceil(left / pace) : null;
}

/**
 * A page of the history, newest first. Unfiltered, an offset is a position
 * in the index (an expired import there is passed over); with a state, it
 * counts the imports in that state.
 */
export async function importHistory(store: ImportStore, query: HistoryQuery = {}): Promise<HistoryPage> {
  const limit = Math.max(1, query.limit ?? 50);
  const offset = Math.max(0, query.offset ?? 0);
  const now = query.now ?? Date.now();
  const filtered = query.state !== undefined;
  const imports: HistoryEntry[] = [];
  let matched = 0;
  let indexed = 0;
  let nextOffset: number | null = null;
  let position = filtered ? 0 : offset;
  while (nextOffset === null) {
    const page = await store.importIdsPage(position, filtered ? READ_CHUNK : Math.min(READ_CHUNK, limit + 1 - imports.length));
    indexed = page.indexed;
    const summaries = await store.importSummaries(page.ids);
    for (let i = 0; i < page.ids.length && nextOffset === null; i++) {
      const summary = summaries[i];
      if (!summary) continue;
      const entry = historyEntry(page.ids[i] ?? '', summary.record, summary.counts, now);
      if (filtered && entry.state !== query.state) continue;
      matched++;
      if (filtered && matched <= offset) continue;
      if (imports.length === limit) nextOffset = filtered ? offset + limit : position + i;
      else imports.push(entry);
    }
    position += page.ids.length;
    if (page.ids.length === 0 || position >= indexed) break;
  }
  await addEtas(store, imports, now);
  return { imports, indexed, nextOffset };
}

/** ETAs of the running imports of a page, from their series (one read each: few run at once). */
async function addEtas(store: ImportStore, entries: HistoryEntry[], now: number): Promise<void> {
  await Promise.all(
    entries
      .filter((e) => e.state === 'running')
      .map(async (entry) => {
        entry.etaSeconds = etaOf(entry, seriesPoints(await store.seriesHash(entry.importId)), now);
      }),
  );
}

/** One import's history entry (with its ETA while running); undefined when Redis no longer holds it. */
export async function historyOf(store: ImportStore, importId: string, now = Date.now()): Promise<HistoryEntry | undefined> {
  const [summary] = await store.importSummaries([importId]);
  if (!summary) return undefined;
  const entry = historyEntry(importId, summary.record, summary.counts, now);
  await addEtas(store, [entry], now);
  return entry;
}

/** An import's series as points (rows settled and 429s per bucket). */
export async function importSeries(store: ImportStore, importId: string): Promise<SeriesPoint[]> {
  return seriesPoints(await store.seriesHash(importId));
}
