import path from 'node:path';
import { DEFAULT_RETENTION_DAYS } from '../config.js';
import type { Logger } from 'pino';
import { passwordColumn, secretColumnIndexes } from '../csv/rows.js';
import type { Notifier } from '../notify/notifier.js';
import type { Queues } from '../queue/queues.js';
import { forgetCardData } from './cardData.js';
import { scrubSecrets } from '../secrets.js';
import { isRowStatus } from '../outcomes.js';
import { planOf } from '../store/plan.js';
import { apiFiguresOf, writeImportResults, type ResultFiles, type ResultRow } from '../results/writeResults.js';
import { isSettled, type ImportStore } from '../store/importStore.js';
import type { RedisClient } from '../redis/redis.js';
import { markRunCancelled } from './runState.js';

/** The `_error` of a cancelled row in results.csv. */
export const CANCELLED_NOTE = 'not sent: the import was cancelled before this row was sent; it is in unprocessed.csv';

/** Where an import's results go: `<data dir>/results/<importId>/`. */
export const resultsDirOf = (dataDir: string, importId: string): string => path.join(dataDir, 'results', importId);

/**
 * Writes results.csv, errors.csv and summary.json once every row of an
 * import has settled, from the ledger alone, so any worker
 * on any machine can do it. A stale round (a retry reopened rows since) is
 * skipped: the round that settles last writes the files.
 */
export async function finalizeImport(input: {
  store: ImportStore;
  queues: Queues;
  importId: string;
  round: number;
  dataDir: string;
  logger: Logger;
  /** How long the import's data stays in Redis once finished (SUBSYNC_RETENTION_DAYS). */
  retentionDays?: number;
  /** SUBSYNC_CSV_BOM: results.csv and errors.csv start with a UTF-8 BOM. Default true. */
  bom?: boolean;
  /** The store's Redis: a cancelling import becomes cancelled once its results are written. */
  redis?: RedisClient;
  /** Told `import.finished` once the results are written (a queued job; never waited on). */
  notifier?: Notifier;
}): Promise<ResultFiles | undefined> {
  const { store, importId, round } = input;
  const record = await store.getImport(importId);
  if (!record || record.total === undefined || record.round !== round) return undefined;
  const counts = await store.counts(importId);
  if (counts.settled !== record.total) return undefined;

  const plan = planOf(record);
  const card = secretColumnIndexes(plan);
  const cardNumber = card.filter((i) => /AccountNumber$/.test(plan.paths[i] ?? ''));
  const cvc = card.filter((i) => /CVCode$/.test(plan.paths[i] ?? ''));
  const password = passwordColumn(plan);
  const endedAt = record.lastSettledAt ?? Date.now();
  const durationMs = Math.max(1, endedAt - record.createdAt);

  // Rows that may keep a job holding card data (failed, needs-review), found in the same pass.
  const keptRows: number[] = [];
  const holdsCards = record.kind !== 'customers';
  async function* rows(): AsyncGenerator<ResultRow> {
    for await (const { row, entry } of store.rowsInOrder(importId, record?.total ?? 0)) {
      if (!isSettled(entry.status) || !isRowStatus(entry.status)) throw new Error(`import ${importId}: row ${row} is not settled`);
      if (holdsCards && entry.job !== null && (entry.status === 'failed' || entry.status === 'needs-review')) keptRows.push(row);
      const candidates = entry.candidates?.length ? ` (candidates: ${entry.candidates.join(', ')})` : '';
      yield {
        row,
        cells: entry.cells,
        status: entry.status,
        customerId: entry.customerId ?? '',
        subscriptionId: entry.subscriptionId ?? '',
        paymentMethodKey: entry.paymentMethodKey ?? '',
        attempts: entry.attempts,
        // Reasons are scrubbed where they are stored; a ledger written before that is scrubbed here.
        // (Not the candidates: customer ids from the service, which a long one would look like a card to.)
        error: entry.status === 'cancelled' ? CANCELLED_NOTE : `${scrubSecrets(entry.note ?? '')}${candidates}`,
      };
    }
  }

  const files = await writeImportResults({
    dir: resultsDirOf(input.dataDir, importId),
    bom: input.bom,
    headers: record.headers,
    secretColumns: { cardNumber, cvc, password: password === undefined ? [] : [password] },
    rows: rows(),
    unprocessed: counts.byStatus.cancelled > 0,
    summary: {
      importId,
      file: record.file,
      kind: record.kind,
      rows: record.total,
      counts: counts.byStatus,
      startedAt: new Date(record.createdAt).toISOString(),
      endedAt: new Date(endedAt).toISOString(),
      durationMs,
      rowsPerSecond: Math.round((record.total / durationMs) * 1000 * 10) / 10,
      ...apiFiguresOf(counts),
    },
  });
  // The import has settled: its card data goes before it is seen as finished.
  await forgetCardData(input.queues, importId, keptRows);
  // The records an upsert's scan kept are personal data the results now hold.
  await store.forgetFinding(importId);
  // A cancelling import whose rows have all settled is cancelled, before it is marked finished: a status
  // read between the two then never sees a finished import still cancelling. (Stopped between them, the
  // finalize runs again, and only marks it finished.)
  if (input.redis) await markRunCancelled(input.redis, store.keys, importId);
  // Finished: its record, ledger and counts now expire (a retry takes the expiry off again).
  const retentionDays = input.retentionDays ?? DEFAULT_RETENTION_DAYS;
  await store.markFinished(importId, round, files.dir, retentionDays * 24 * 3600);
  input.logger.info({ importId, dir: files.dir, retentionDays }, 'import settled; results written');
  // One event per round that finishes (its id carries the round): a finalize run again raises the same id, queued once.
  await input.notifier?.notify({ event: 'import.finished', importId, round });
  return files;
}
