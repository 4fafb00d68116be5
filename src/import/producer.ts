import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ApiClient } from '../api/client.js';
import { ApiNotFoundError } from '../api/errors.js';
import { ACTIVE_OFFER_STATUS } from '../api/schemas/index.js';
import type { ExpiryFormat } from '../api/rules.js';
import { sealSecrets, type CardKeyring } from '../cards/crypto.js';
import { CUSTOMER_ID, detectKind, loadColumnMap, planColumns, resolvePath, type ColumnPlan } from '../csv/columns.js';
import { fieldKey, freshDigestOf, identityKey } from '../customers/identity.js';
import type { CustomerIndex } from '../customers/customerIndex.js';
import { createEstimator, type RequestEstimate } from '../customers/estimate.js';
import type { RefreshDeps } from '../customers/refresh.js';
import { FileRejectedError } from '../csv/errors.js';
import { openCsv, readHeaders, type ReadOptions } from '../csv/reader.js';
import { scanCsvBytes, showsRounding } from '../csv/scan.js';
import { PASSWORD, RowValues, cellOf, cellReader, maskCells, passwordColumn, sealedColumnIndexes, secretColumnIndexes, secretValues, validateRow, type RowError, type RowOptions, type RowReader } from '../csv/rows.js';
import type { ImportKind, JobName } from '../outcomes.js';
import { RETRY_DEFAULTS } from '../policy.js';
import { ROWS_PER_BATCH, batchOf, batchRowsOf, enqueueFinalize, type Queues, type RowBatchData } from '../queue/queues.js';
import { pushBacklog, type ImportPriority } from '../queue/feeder.js';
import type { RedisClient } from '../redis/redis.js';
import type { ImportJournal } from '../store/continuity.js';
import type { ImportStore, LedgerEntry } from '../store/importStore.js';
import { personOf, rowKeys } from './rowKeys.js';
import { rowTermDigests, searchableValues } from './searchTerms.js';
import { scrubSecrets } from '../secrets.js';
import { SeenKeys } from './seenKeys.js';
import { slicer } from '../slices.js';
import { concludeCanary } from './control.js';
import { startCanary } from './runState.js';
import type { Notifier } from '../notify/notifier.js';

/**
 * Rows per flush: their ledger entries and invalid settles in one script call
 * each, then one addBulk of their batch jobs. A flush ends only where a batch
 * (the import's batchRows consecutive rows) ends, so a batch is never split.
 * An import's first flush is one batch: workers start on it while the rest
 * of the file is parsed, instead of waiting for the first BATCH_ROWS.
 */
const BATCH_ROWS = 500;
/**
 * Flushes in flight while the next batch is parsed. Two keep Redis busy
 * during the parse and the parse busy during Redis round trips; more would
 * only hold more rows in memory, which stays flat at this bound whatever
 * the file's size.
 */
const MAX_FLUSHES_IN_FLIGHT = 2;
/** Row errors kept for printing; the counts stay exact beyond it. */
const MAX_REPORTED_ERRORS = 1000;

/**
 * The longest the parse holds the event loop between turns (ms). A process
 * that runs workers too (`subsync start`, the demo) sends its paced requests
 * from the same loop: held longer than the budget's lateness allows (5 ms),
 * they wake late and lose their slots. While `subsync start` read a
 * 200,000-row file beside a running import at SUBSYNC_RATE=200 (a slow
 * 2-core host), the fleet's rate fell from 195 to 80–110 requests a
 * second; with the parse sliced, to 149–175.
 */
const PARSE_SLICE_MS = 3;

export interface ImportRequest {
  file: string;
  /** `--kind`; else the inbox sub-folder; else the headers. */
  kind?: string;
  inboxFolder?: string;
  /** `--map FILE`: JSON of {"Their Column": "Path"}. */
  mapFile?: string;
  /** `--match FIELD`: upsert customers on this field. */
  match?: string;
  expiryFormat?: ExpiryFormat;
  /** `--encoding NAME`: read the file in this encoding (a TextDecoder label) instead of UTF-8. */
  encoding?: string;
  /** Attempts per row (`--attempts`), default 8. */
  attempts?: number;
  dryRun?: boolean;
  /** Import identical bytes again under a new id. */
  force?: boolean;
  /** Enqueue nothing when any row is invalid. */
  allOrNothing?: boolean;
  /**
   * Send rows about a person or record an earlier row of the file is about
   * (`--allow-duplicates`); by default they settle as `duplicate`, unsent.
   */
  allowDuplicates?: boolean;
  /**
   * An update without a Password column sends passwords empty (the service's
   * PUT replaces the whole record and never returns a password): refused
   * unless this says it is meant (`--send-empty-passwords`).
   */
  sendEmptyPasswords?: boolean;
  /** Text that looks like UTF-8 read as Windows-1252 and saved again is meant as written (`--accept-misdecoded-text`). */
  acceptMisdecodedText?: boolean;
  /** `--priority`: the import's weight in the turn of imports sharing the budget (src/queue/feeder.ts). Default normal. */
  priority?: ImportPriority;
  /**
   * `--canary N [--canary-max-failures P]`: the first `rows` rows run
   * first, the rest waits until they have settled, and the import pauses
   * itself when more than `maxFailures` of them did not succeed.
   */
  canary?: { rows: number; maxFailures: number };
}

export interface OfferCheck {
  offerCode: string;
  problem: string | undefined;
}

export type ImportResult =
  | { outcome: 'enqueued'; importId: string; kind: ImportKind; rows: number; invalid: number; duplicates: number; resumed: boolean; errors: RowError[] }
  | { outcome: 'already-imported'; importId: string; kind: ImportKind }
  /** Another producer holds the enqueue lease of these bytes: it is enqueuing them now, and this one did nothing. */
  | { outcome: 'in-progress'; importId: string; kind: ImportKind }
  | { outcome: 'dry-run'; importId: string; kind: ImportKind; rows: number; invalid: number; duplicates: number; errors: RowError[]; offers: OfferCheck[]; estimate: RequestEstimate }
  | { outcome: 'rejected'; importId: string; kind: ImportKind; rows: number; invalid: number; duplicates: number; errors: RowError[] };

export interface ProducerDeps {
  store: ImportStore;
  queues: Queues;
  /** Seals card cells in job data; card files are refused without it. */
  keyring: CardKeyring | undefined;
  /** For `--dry-run` of sign-ups: reads each distinct offer. */
  api?: ApiClient;
  logger: Logger;
  now?: () => number;
  /** Imports started from this data dir; one Redis no longer knows was lost with it. */
  journal?: ImportJournal;
  /**
   * The store's Redis, for the enqueue lease: with it, a second producer of the same bytes
   * while one enqueues returns `in-progress` instead of enqueuing beside it. Without it, no lease.
   */
  redis?: RedisClient;
  /** Told `import.paused` when the import's canary pauses it at once (its rows all invalid). */
  notifier?: Pick<Notifier, 'notify'>;
  /** Told the import id as soon as it is known, before any row is read. */
  onImportId?: (importId: string, kind: ImportKind) => void;
  /** For `--dry-run`'s plan and cost: the customer index, and what reading the end of the listing needs. */
  customers?: CustomerIndex;
  refresh?: Omit<RefreshDeps, 'api' | 'index'>;
}

/**
 * Validates a CSV file and enqueues its valid rows (in batch jobs). Header
 * problems reject the file before anything is enqueued. The import id is
 * the hash of the kind and the file's bytes, and each job id derives from
 * it, so a producer re-run after a crash half-way adds nothing twice: ledger entries are written only where none exists, settled
 * rows stay settled, and BullMQ ignores a job id it already has.
 *
 * The file is parsed once. Before it, one read at disk speed hashes the bytes
 * (the import id must be known before any row is written, and before the
 * already-imported check) and checks the quoting (src/csv/scan.ts): a file it
 * has any doubt about is parsed through first, so a malformed record deep in
 * it still rejects it before anything is queued. The first batch is queued
 * on its own, before the parse goes on, so workers start at once; then
 * flushes of {@link BATCH_ROWS} rows go while the next ones are parsed, at
 * most {@link MAX_FLUSHES_IN_FLIGHT} at a time; within a flush the ledger
 * entries are written before the jobs are added.
 *
 * Two commands importing the same bytes at once would both enqueue them
 * (harmlessly, but the second would call it a resumed enqueue): the enqueue
 * holds a short lease in Redis (`takeEnqueueLease`), and a producer that finds
 * it held returns `in-progress` without doing anything.
 */
export async function importFile(request: ImportRequest, deps: ProducerDeps): Promise<ImportResult> {
  const { store, logger } = deps;
  const now = deps.now ?? Date.now;
  const file = request.file;
  const map = request.mapFile === undefined ? undefined : await loadColumnMap(request.mapFile);
  // The map's columns count as known when the reader decides the delimiter and the header line.
  const read = { encoding: request.encoding, map };
  const headers = await readHeaders(file, read);
  const kind = detectKind({ explicit: request.kind, inboxFolder: request.inboxFolder, headers, map, file });
  // planColumns refuses a --match that is not a customer column of this file.
  const plan = planColumns({ file, kind, headers, map, match: request.match });
  const match = request.match === undefined ? undefined : resolvePath('customers', request.match.trim());
  const options: RowOptions = { expiryFormat: request.expiryFormat ?? 'MMYY', match, ...(request.acceptMisdecodedText ? { acceptMisdecodedText: true } : {}) };
  if (!request.sendEmptyPasswords) await refuseBlankedPasswords(file, plan, match);
  if (secretColumnIndexes(plan).length > 0 && !deps.keyring && !request.dryRun) {
    throw new FileRejectedError(file, ['the file holds card data (AccountNumber/CVCode), and card data is only queued encrypted: set SUBSYNC_CARD_KEY (64 hex characters)']);
  }
  if (!deps.keyring && !request.dryRun) await refuseClearPasswords(file, plan, read);
  if (request.canary && !deps.redis && !request.dryRun) throw new Error('a canary needs the store\'s Redis (ProducerDeps.redis)');
  // Card cells and passwords: masked in the ledger, sealed in the job data.
  const secretColumns = sealedColumnIndexes(plan);

  const { digest, wellFormed, rounded } = await scanFile(file, kind);
  options.roundedCardNumbers = rounded;
  if (request.force && !request.dryRun) await refuseForceWhileUnsettled(store, file, digest);
  const importId = request.force ? `${digest}-${now().toString(36)}${randomBytes(2).toString('hex')}` : digest;
  deps.onImportId?.(importId, kind);
  const log = logger.child({ importId, file });
  let existing = await store.getImport(importId);
  if (existing?.state === 'enqueued' && !request.dryRun) return { outcome: 'already-imported', importId, kind };
  // A dry run enqueues nothing, so it takes no lease.
  const lease = request.dryRun || !deps.redis ? undefined : await takeEnqueueLease(deps.redis, store.keys, importId, log);
  if (lease === 'held') return { outcome: 'in-progress', importId, kind };
  try {
    // The holder before may have finished between the check above and the lease.
    if (lease) existing = await store.getImport(importId);
    if (existing?.state === 'enqueued' && !request.dryRun) return { outcome: 'already-imported', importId, kind };
    return await enqueueRows({ request, deps, file, kind, plan, match, options, read, secretColumns, wellFormed, importId, digest, existing, log });
  } finally {
    await lease?.release();
  }
}

/** How long an enqueue lease lives without renewal: a producer killed mid-enqueue blocks a rerun no longer than this. */
export const ENQUEUE_LEASE_MS = 30_000;
/** How often a running producer renews its lease. */
const ENQUEUE_LEASE_RENEW_MS = 10_000;

/** The key of an import's enqueue lease: `<prefix>:import:<id>:enqueuing`. */
export const enqueueLeaseKey = (keys: ImportStore['keys'], importId: string): string => `${keys.importRecord(importId)}:enqueuing`;

/** Renews or releases a lease only while it is still this producer's (compared by token). */
const RENEW_LEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
const RELEASE_LEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

interface EnqueueLease {
  release(): Promise<void>;
}

/**
 * Takes the import's enqueue lease (SET NX PX), or says it is `held` by
 * another producer: two commands importing the same bytes at once must not
 * both enqueue, and the second should say the first is at it rather than
 * "resumed". Renewed every ENQUEUE_LEASE_RENEW_MS while the enqueue runs; a
 * producer killed outright leaves it to expire, and a rerun then resumes.
 */
async function takeEnqueueLease(redis: RedisClient, keys: ImportStore['keys'], importId: string, log: Logger): Promise<EnqueueLease | 'held'> {
  const key = enqueueLeaseKey(keys, importId);
  const token = randomBytes(8).toString('hex');
  if ((await redis.set(key, token, 'PX', ENQUEUE_LEASE_MS, 'NX')) !== 'OK') return 'held';
  const renew = setInterval(() => {
    redis.eval(RENEW_LEASE, 1, key, token, String(ENQUEUE_LEASE_MS)).then(
      (renewed) => {
        // Lost (the process stalled past its lifetime): the enqueue is idempotent, so it goes on; another producer may have resumed it.
        if (renewed !== 1) log.warn('the enqueue lease expired while enqueuing; another command may be enqueuing the same rows (each is added once)');
      },
      (error: unknown) => log.warn({ err: error }, 'the enqueue lease could not be renewed'),
    );
  }, ENQUEUE_LEASE_RENEW_MS);
  renew.unref();
  return {
    async release() {
      clearInterval(renew);
      await redis.eval(RELEASE_LEASE, 1, key, token).catch((error: unknown) => log.warn({ err: error }, 'the enqueue lease was not released; it expires by itself'));
    },
  };
}

/** The rest of importFile, once it holds the lease (or enqueues nothing: a dry run). */
async function enqueueRows(input: {
  request: ImportRequest;
  deps: ProducerDeps;
  file: string;
  kind: ImportKind;
  plan: ColumnPlan;
  match: string | undefined;
  options: RowOptions;
  read: ReadOptions;
  secretColumns: number[];
  wellFormed: boolean;
  importId: string;
  digest: string;
  existing: Awaited<ReturnType<ImportStore['getImport']>>;
  log: Logger;
}): Promise<ImportResult> {
  const { request, deps, file, kind, plan, match, options, read, secretColumns, wellFormed, importId, digest, existing, log } = input;
  const { store, queues } = deps;
  const now = deps.now ?? Date.now;

  const guard = request.allowDuplicates ? undefined : new SeenKeys();
  if (request.dryRun || request.allOrNothing) {
    const estimator = request.dryRun
      ? createEstimator({ index: deps.customers, refresh: deps.refresh, api: deps.api, match, guard: request.allowDuplicates !== true })
      : undefined;
    const check = await validateAll(plan, file, options, kind === 'signups', read, request.allowDuplicates !== true, estimator);
    if (request.dryRun) {
      const offers = deps.api ? await checkOffers(deps.api, check.offerCodes) : [];
      const estimate = await (estimator ?? createEstimator({ index: undefined, refresh: undefined, api: undefined, match, guard: false })).finish();
      return { outcome: 'dry-run', importId, kind, rows: check.rows, invalid: check.invalid, duplicates: check.duplicates, errors: check.errors, offers, estimate };
    }
    if (check.invalid > 0) return { outcome: 'rejected', importId, kind, rows: check.rows, invalid: check.invalid, duplicates: check.duplicates, errors: check.errors };
  } else if (!wellFormed) {
    // A malformed record (an unclosed quote) deep in the file must reject it
    // before anything is queued, not leave an import half enqueued. The scan
    // only doubted: csv-parse decides, with its own message and line.
    await readThrough(file, read);
  }

  const resumed = existing !== undefined;
  // A resumed import keeps the batches it was enqueued with: the same blocks, the same job ids.
  const batchRows = existing ? batchRowsOf(existing) : ROWS_PER_BATCH;
  // Known here but not to Redis: Redis lost it, and any of its rows may have been sent.
  const lost = !resumed && (await deps.journal?.has(importId)) === true;
  if (lost) log.warn('this file was imported before and Redis has lost that import: every create reads back before sending');
  if (!resumed) {
    // Where the file is, and its digest: a card row whose sealed cells Redis loses reads them from it again (src/import/cardCells.ts).
    await deps.journal?.record(importId, { file: path.basename(file), kind, createdAt: now(), source: { path: path.resolve(file), digest, encoding: read.encoding, map: read.map } });
    await store.createImport({
      id: importId,
      file: path.basename(file),
      kind,
      headers: plan.headers,
      paths: plan.paths,
      options: {
        match,
        expiryFormat: options.expiryFormat,
        attempts: request.attempts ?? RETRY_DEFAULTS.attempts,
        ...(request.allowDuplicates ? { allowDuplicates: true } : {}),
      },
      createdAt: now(),
      state: 'enqueuing',
      round: 0,
      batchRows,
    });
    // Before any row is queued: no worker may start a row after the canary's before they have settled.
    if (request.canary && deps.redis) await startCanary(deps.redis, store.keys, importId, request.canary.rows, request.canary.maxFailures, now());
  }
  // The import's place in the turn of imports sharing the budget: when it first came.
  const createdAt = existing?.createdAt ?? now();
  log.info({ kind, resumed }, 'enqueuing');

  let rows = 0;
  let invalid = 0;
  let duplicates = 0;
  const errors: RowError[] = [];
  const sealed = secretColumns.length > 0 ? deps.keyring : undefined;
  const flushes = new Set<Promise<void>>();
  let flushError: { error: unknown } | undefined;
  const flush = (batch: Batch): void => {
    const done = (async () => {
      // Ledger first: a job must always find its row's entry.
      await Promise.all([
        store.putPendingRows(importId, batch.pending),
        store.settleMany(importId, batch.settled, now()),
        store.addMatchDigests(importId, batch.matchDigests),
        store.addSearchTerms(importId, batch.terms),
      ]);
      // Into the import's backlog, from which the feeder releases batches to the rows queue in the import's turn.
      if (batch.jobs.size > 0) {
        await pushBacklog(queues.redis, queues.prefix, importId, [...batch.jobs].map(([block, data]) => ({ block, data })), request.priority, createdAt);
      }
    })()
      .catch((error: unknown) => {
        flushError ??= { error };
      })
      .finally(() => flushes.delete(done));
    flushes.add(done);
  };
  /** Waits for every flush in flight; rethrows the first one's failure. */
  const settleFlushes = async (): Promise<void> => {
    await Promise.all(flushes);
    if (flushError) throw flushError.error;
  };

  let batch = emptyBatch();
  let flushed = false;
  const csv = await openCsv(file, read);
  const slice = slicer(PARSE_SLICE_MS);
  try {
    for await (const parsed of csv.batches) {
      for (const csvRow of parsed) {
        const turn = slice();
        if (turn) await turn;
        rows = csvRow.row;
        // Cleaned once: validation, the job's name, the search terms and the duplicate guard all read them.
        const values = new RowValues(plan, csvRow.cells);
        const checked = validateRow(plan, csvRow, options, values);
        // Without card or password columns there is nothing to mask or scrub, and the cells are only serialised.
        const cells = secretColumns.length > 0 ? maskCells(plan, csvRow.cells) : csvRow.cells;
        const rowErrors = secretColumns.length > 0 && checked.length > 0 ? withoutRowSecrets(checked, secretValues(plan, csvRow.cells)) : checked;
        const name = rowErrors.length > 0 ? null : jobNameFrom(plan, values, options);
        // Every row is searchable, invalid ones too (src/import/searchTerms.ts; never a card or password column).
        for (const digest of rowTermDigests(searchableValues(plan, searchedValues(plan, csvRow.cells, cells, values)))) {
          const rowsOfTerm = batch.terms.get(digest);
          if (rowsOfTerm) rowsOfTerm.push(csvRow.row);
          else batch.terms.set(digest, [csvRow.row]);
        }
        const earlier = name !== null && guard ? earlierRow(guard, plan, csvRow.row, values, name, options) : undefined;
        if (name === null) {
          invalid++;
          if (errors.length < MAX_REPORTED_ERRORS) errors.push(...rowErrors.slice(0, MAX_REPORTED_ERRORS - errors.length));
          batch.settled.push({ row: csvRow.row, entry: { cells, job: null, status: 'invalid', attempts: 0, note: rowErrors.map((e) => e.message).join('; ') } });
        } else if (earlier !== undefined) {
          duplicates++;
          batch.settled.push({ row: csvRow.row, entry: { cells, job: name, status: 'duplicate', attempts: 0, note: earlier } });
        } else {
          batch.pending.push({ row: csvRow.row, entry: { cells, job: name, status: lost ? 'sent' : 'pending', attempts: 0 } });
          if (name === 'customer.upsert' && match !== undefined) batch.matchDigests.push(freshDigestOf(fieldKey(match, values.get(match) ?? '')));
          const block = batchOf(csvRow.row, batchRows);
          let job = batch.jobs.get(block);
          if (!job) batch.jobs.set(block, (job = { importId, rows: [] }));
          job.rows.push(csvRow.row);
          // A customers row without a password has nothing to seal: its ledger cells are what it sends.
          if (sealed && (plan.kind !== 'customers' || secretColumns.some((index) => (csvRow.cells[index] ?? '') !== ''))) {
            const secrets: Record<string, string> = {};
            for (const index of secretColumns) secrets[String(index)] = csvRow.cells[index] ?? '';
            (job.secrets ??= {})[String(csvRow.row)] = sealSecrets(sealed, secrets);
          }
        }
        const flushAt = flushed ? BATCH_ROWS : batchRows;
        if (batch.pending.length + batch.settled.length >= flushAt && batchOf(csvRow.row + 1, batchRows) !== batchOf(csvRow.row, batchRows)) {
          flush(batch);
          batch = emptyBatch();
          // The first batch goes into the backlog before the parse goes on: the parse would hold the
          // event loop, and with it the flush's last step, for the next BATCH_ROWS rows.
          if (!flushed) await settleFlushes();
          flushed = true;
          // Parse on while Redis writes, but never more than the bound ahead of it.
          while (flushes.size >= MAX_FLUSHES_IN_FLIGHT) await Promise.race(flushes);
          if (flushError) throw flushError.error;
        }
      }
    }
    flush(batch);
    await settleFlushes();
  } finally {
    csv.close();
    // A failed parse or flush still lets the flushes in flight end before the error is told.
    await Promise.allSettled(flushes);
  }

  const enqueued = await store.markEnqueued(importId, rows);
  // Every row may already have settled (all invalid, or fast workers): then the producer finalises.
  if (enqueued.complete) await enqueueFinalize(queues, importId, enqueued.round);
  // The canary's rows may all have settled here (invalid, or shorter than the file said): end it now.
  if (request.canary && deps.redis) await concludeCanary({ store, queues, redis: deps.redis, logger: log, notifier: deps.notifier }, importId);
  log.info({ rows, invalid, duplicates }, 'enqueued');
  return { outcome: 'enqueued', importId, kind, rows, invalid, duplicates, resumed, errors };
}

/**
 * `--force` imports the same bytes again under a new id, sending every row
 * again: what the operator asks for once the earlier import is over. While an
 * earlier import of these bytes still has rows without an outcome, those rows
 * may be running, or be stuck with a request out, and a second import would
 * send them twice: refused, saying how to finish the earlier one.
 */
async function refuseForceWhileUnsettled(store: ImportStore, file: string, digest: string): Promise<void> {
  for (const earlier of new Set([digest, ...(await store.importIdsStartingWith(`${digest}-`))])) {
    const record = await store.getImport(earlier);
    if (!record) continue;
    const settled = (await store.counts(earlier)).settled;
    if (record.state === 'enqueued' && record.total !== undefined && settled >= record.total) continue;
    const left = record.total === undefined ? 'rows not yet enqueued' : `${record.total - settled} rows without an outcome`;
    throw new FileRejectedError(file, [
      `--force refused: import ${earlier} of the same bytes still has ${left}, and importing again now could send those rows twice; ` +
        `let it finish (\`subsync status ${earlier}\`; \`subsync retry ${earlier}\` runs rows that are stuck${record.total === undefined ? '; or run the same import again without --force to finish enqueuing it' : ''}), then use --force`,
    ]);
  }
}

/** The job a valid row runs. */
export function jobNameOf(plan: ColumnPlan, cells: readonly string[], options: RowOptions): JobName {
  return jobNameFrom(plan, cellReader(plan, cells), options);
}

function jobNameFrom(plan: ColumnPlan, row: RowReader, options: RowOptions): JobName {
  if (plan.kind === 'signups') return 'signup';
  if (plan.kind === 'cards') return 'paymentMethod.update';
  if ((row.get(CUSTOMER_ID) ?? '').trim() !== '') return 'customer.update';
  return options.match ? 'customer.upsert' : 'customer.create';
}

/**
 * The values a row is searched by, from its masked cells (`masked`): the
 * same as the row's own `values` when its cells line up with the header, as
 * masking then changes only card, CVC and password columns, which are never
 * searched; a row out of line has other cells masked too, so they are read again.
 */
function searchedValues(plan: ColumnPlan, raw: readonly string[], masked: readonly string[], values: RowValues): RowValues {
  return masked === raw || raw.length === plan.headers.length ? values : new RowValues(plan, masked);
}

/** Parses the whole file without validating rows: throws CsvFormatError for a malformed one. */
async function readThrough(file: string, read: ReadOptions): Promise<void> {
  const csv = await openCsv(file, read);
  try {
    for await (const _row of csv.rows);
  } finally {
    csv.close();
  }
}

/**
 * One read of the file: sha256 of the kind and the bytes (the import id),
 * and whether csv-parse surely reads the whole file (src/csv/scan.ts).
 */
export async function scanFile(file: string, kind: ImportKind): Promise<{ digest: string; wellFormed: boolean; rounded: boolean }> {
  const hash = createHash('sha256').update(`${kind}\n`);
  const { wellFormed, longNumbers } = await scanCsvBytes(file, (chunk) => hash.update(chunk));
  return { digest: hash.digest('hex').slice(0, 24), wellFormed, rounded: showsRounding(longNumbers) };
}

/** The rows of one flush. */
interface Batch {
  pending: Array<{ row: number; entry: LedgerEntry }>;
  /** Rows settled without a job: invalid, or duplicates of an earlier row. */
  settled: Array<{ row: number; entry: LedgerEntry }>;
  /** Upserts: the digests of their match values (src/customers/finder.ts plans from them). */
  matchDigests: Buffer[];
  /** Batch jobs by block. */
  jobs: Map<number, RowBatchData>;
  /** Search terms of the batch's rows: digest -> rows (src/store/searchIndex.ts). */
  terms: Map<string, number[]>;
}

const emptyBatch = (): Batch => ({ pending: [], settled: [], matchDigests: [], jobs: new Map(), terms: new Map() });

async function validateAll(
  plan: ColumnPlan,
  file: string,
  options: RowOptions,
  collectOffers: boolean,
  read: ReadOptions,
  guardDuplicates: boolean,
  estimator?: ReturnType<typeof createEstimator>,
): Promise<{ rows: number; invalid: number; duplicates: number; errors: RowError[]; offerCodes: Set<string> }> {
  let rows = 0;
  let invalid = 0;
  let duplicates = 0;
  const errors: RowError[] = [];
  const offerCodes = new Set<string>();
  const guard = guardDuplicates ? new SeenKeys() : undefined;
  const secrets = sealedColumnIndexes(plan).length > 0;
  const csv = await openCsv(file, read);
  try {
    for await (const csvRow of csv.rows) {
      rows = csvRow.row;
      const values = new RowValues(plan, csvRow.cells);
      const checked = validateRow(plan, csvRow, options, values);
      const rowErrors = secrets && checked.length > 0 ? withoutRowSecrets(checked, secretValues(plan, csvRow.cells)) : checked;
      if (rowErrors.length > 0) {
        invalid++;
        if (errors.length < MAX_REPORTED_ERRORS) errors.push(...rowErrors.slice(0, MAX_REPORTED_ERRORS - errors.length));
        continue;
      }
      const name = jobNameFrom(plan, values, options);
      if (guard && earlierRow(guard, plan, csvRow.row, values, name, options)) {
        duplicates++;
        continue;
      }
      if (estimator) {
        const creates = name === 'customer.create' || name === 'signup' || name === 'customer.upsert';
        const matchKey = name === 'customer.upsert' && options.match ? fieldKey(options.match, values.get(options.match) ?? '') : undefined;
        const person = creates ? personOf(plan, values) : undefined;
        await estimator.add(name, person ? identityKey(person) : undefined, matchKey, person);
      }
      if (collectOffers) {
        const code = values.get('Subscription.OfferCode');
        if (code) offerCodes.add(code);
      }
    }
  } finally {
    csv.close();
  }
  return { rows, invalid, duplicates, errors, offerCodes };
}

/**
 * The note of a row that is about the same person or record as an earlier
 * row of the file (rowKeys.ts), or undefined when it is the first.
 */
function earlierRow(seen: SeenKeys, plan: ColumnPlan, row: number, values: RowReader, name: JobName, options: RowOptions): string | undefined {
  for (const { key, what } of rowKeys(plan, values, name, options)) {
    const earlier = seen.firstRow(freshDigestOf(key), row);
    if (earlier !== 0) return `${what} as row ${earlier} of this file: not sent (--allow-duplicates sends such rows)`;
  }
  return undefined;
}

/** Row errors whose messages hold none of the row's secrets (a password typed into another column would be quoted). */
function withoutRowSecrets(errors: RowError[], secrets: readonly string[]): RowError[] {
  return errors.map((error) => ({ ...error, message: scrubSecrets(error.message, secrets) }));
}

/**
 * Passwords travel as card data does, sealed in the job data, so a file
 * with a password in it is refused without SUBSYNC_CARD_KEY, before
 * anything is queued: read through until the first non-empty Password cell.
 * A Password column left empty throughout holds nothing to seal.
 */
async function refuseClearPasswords(file: string, plan: ColumnPlan, read: ReadOptions): Promise<void> {
  if (passwordColumn(plan) === undefined) return;
  const csv = await openCsv(file, read);
  try {
    for await (const row of csv.rows) {
      if ((cellOf(plan, row.cells, PASSWORD) ?? '') === '') continue;
      throw new FileRejectedError(file, [
        `the file holds passwords (row ${row.row} has one in its Password column), and passwords are only queued encrypted: set SUBSYNC_CARD_KEY (64 hex characters)`,
      ]);
    }
  } finally {
    csv.close();
  }
}

/**
 * The service's PUT replaces the whole record and returns Password empty,
 * so an update built from a file without a Password column would blank the
 * password of every customer it touches. Such a file is refused before
 * anything is sent: an upsert (`--match`) at once, a file with a CustomerID
 * column once a row is found that has one (a file of creates may carry an
 * empty CustomerID column).
 */
async function refuseBlankedPasswords(file: string, plan: ColumnPlan, match: string | undefined): Promise<void> {
  if (plan.kind !== 'customers' || plan.index.has(PASSWORD)) return;
  const fix = `add a Password column with each customer's password, or pass --send-empty-passwords if blank passwords are meant`;
  const why = `the service's update replaces the whole record and never returns a password, so every customer it updates would have an empty password`;
  if (match !== undefined) throw new FileRejectedError(file, [`--match updates customers, and the file has no Password column: ${why}; ${fix}`]);
  if (!plan.index.has(CUSTOMER_ID)) return;
  const csv = await openCsv(file);
  try {
    for await (const row of csv.rows) {
      if ((cellOf(plan, row.cells, CUSTOMER_ID) ?? '') === '') continue;
      throw new FileRejectedError(file, [`row ${row.row} updates customer ${cellOf(plan, row.cells, CUSTOMER_ID) ?? ''}, and the file has no Password column: ${why}; ${fix}`]);
    }
  } finally {
    csv.close();
  }
}

/**
 * Reads each distinct offer of a sign-ups file: it must exist and be Active.
 * Whether an offer requires provisioning is not part of the Offer object
 * (not shown by the service's interface), so that is left to the service's refusal.
 */
async function checkOffers(api: ApiClient, codes: ReadonlySet<string>): Promise<OfferCheck[]> {
  const checks: OfferCheck[] = [];
  for (const offerCode of codes) {
    try {
      const { Offer } = await api.getOffer(offerCode);
      checks.push({ offerCode, problem: Offer.Status === ACTIVE_OFFER_STATUS ? undefined : `offer ${offerCode} is ${Offer.Status}, not ${ACTIVE_OFFER_STATUS}` });
    } catch (error) {
      if (!(error instanceof ApiNotFoundError)) throw error;
      checks.push({ offerCode, problem: `offer ${offerCode} does not exist` });
    }
  }
  return checks;
}
