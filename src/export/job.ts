/**
 * The export control job: pages every customer (pager.ts),
 * assembles the spooled pages in page order into one de-duplicated file
 * (writer.ts), writes its manifest, prunes past `--keep`, and cleans up. A run
 * that is killed or fails is resumed by the job's next run from the pages
 * already finished (state.ts, spool.ts).
 */
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { UnrecoverableError, type Job, type Queue } from 'bullmq';
import type { RedisClient } from '../redis/redis.js';
import type { Logger } from 'pino';
import type { ApiClient } from '../api/client.js';
import { ApiError } from '../api/errors.js';
import { CUSTOMER_FIELDS } from '../api/schemas/index.js';
import { EXPORT_DEFAULTS, PAGE_RETRY_BACKOFF, SEARCH_PAGE_SIZE } from '../policy.js';
import type { ApiBudget } from '../redis/budget.js';
import type { Notifier } from '../notify/notifier.js';
import { FAILED_RETENTION_SECONDS } from '../queue/queues.js';
import { DEFAULT_INDEXED_FIELDS, type CustomerIndex, type IndexBuild } from '../customers/customerIndex.js';
import type { Customer } from '../api/schemas/index.js';
import { createInOrderWriter, type WrittenPrefix } from './inOrder.js';
import { compareIds } from '../customers/search.js';
import { formatPages, locationOf, readEverything, type PagedListing, type PagerOptions, type PagingOutcome, type StoredPage } from './pager.js';
import { EXPORT_JOB, ExportRequestSchema, exportIdOf, exportsDirOf, fileStamp, type ExportRequest } from './request.js';
import { openSpool, pruneSpools, spoolDirOf, type Spool, type SpoolLocation } from './spool.js';
import { createExportStore, type ExportRecord, type ExportStore } from './state.js';
import {
  chooseBase,
  exportFileName,
  openExportFile,
  pruneExports,
  writeManifest,
  type ExportFileSink,
  type ExportManifest,
  type WrittenFile,
} from './writer.js';

export { EXPORT_JOB };

/** What the export job uses; a control worker's ControlDeps has all of it. */
export interface ExportDeps {
  connection: RedisClient;
  prefix: string;
  /** The process's API client, drawing from the fleet-wide budget. */
  api: ApiClient;
  /** That budget, told of a 429 (its rate and Retry-After are the fleet's). */
  budget: Pick<ApiBudget, 'block'>;
  dataDir: string;
  logger: Logger;
  /** The customer index: an export that reads every customer in one run rebuilds it. */
  customers?: CustomerIndex;
  /** SUBSYNC_CSV_BOM: a CSV export starts with a UTF-8 BOM. Default true. */
  csvBom?: boolean;
  /** Told `export.finished` and `export.failed` (queued; never waited on). */
  notifier?: Notifier;
}

/** The job's return value, kept by BullMQ as its result. */
export interface ExportResult {
  exportId: string;
  file: string;
  manifest: string;
  count: number;
  complete: boolean;
}

/** Progress as `job.updateProgress` carries it (the record in Redis has the same counters). */
export interface ExportProgress {
  pagesDone: number;
  pagesPlanned: number;
  rows: number;
}

/** How often a running export refreshes its job's progress. */
const PROGRESS_EVERY_MS = 500;

/** BullMQ options of an export job, whether enqueued now or by the schedule. */
export const EXPORT_JOB_OPTIONS = {
  attempts: EXPORT_DEFAULTS.jobAttempts,
  backoff: { type: 'exponential', delay: EXPORT_DEFAULTS.jobBackoffMs },
  removeOnComplete: { age: FAILED_RETENTION_SECONDS },
  removeOnFail: { age: FAILED_RETENTION_SECONDS },
} as const;

/** Queues one export now; returns its id (the id `--wait`, the record and the dashboard use). */
export async function enqueueExport(control: Queue, request: ExportRequest, now = Date.now()): Promise<string> {
  const jobId = `export-${fileStamp(now)}-${randomBytes(3).toString('hex')}`;
  await control.add(EXPORT_JOB, ExportRequestSchema.parse(request), { ...EXPORT_JOB_OPTIONS, jobId });
  return exportIdOf(jobId);
}

/** The control handler of EXPORT_JOB. */
export async function runExportJob(job: Job, deps: ExportDeps, pager: Partial<PagerOptions> = {}): Promise<ExportResult> {
  const parsed = ExportRequestSchema.safeParse(job.data);
  if (!parsed.success || job.id === undefined) throw new UnrecoverableError(`export job ${job.id ?? '?'} has unreadable data`);
  const exportId = exportIdOf(job.id);
  const store = createExportStore(deps.connection, deps.prefix);
  let lastProgress = 0;
  const onPage = (): void => {
    const now = Date.now();
    if (now - lastProgress < PROGRESS_EVERY_MS) return;
    lastProgress = now;
    void store
      .get(exportId)
      .then((r) => r && job.updateProgress({ pagesDone: r.pagesDone, pagesPlanned: r.pagesPlanned, rows: r.rows } satisfies ExportProgress))
      .catch(() => undefined);
  };
  try {
    const result = await runExport({ exportId, jobId: job.id, request: parsed.data, store, deps, pager, onPage });
    await deps.notifier?.notify({ event: 'export.finished', exportId, file: path.basename(result.file), count: result.count, complete: result.complete });
    return result;
  } catch (error) {
    const permanent = error instanceof UnrecoverableError || (error instanceof ApiError && !error.transient);
    const final = permanent || job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
    await store.update(exportId, { status: final ? 'failed' : 'retrying', error: describe(error) }).catch(() => undefined);
    deps.logger.error({ exportId, err: error, final }, 'export run failed');
    // Only the last attempt is a failure to tell: an earlier one is retried (and resumes).
    if (final) await deps.notifier?.notify({ event: 'export.failed', exportId, error: describe(error) });
    // A refusal will not change on the next run; anything else may (the next run resumes).
    if (permanent && !(error instanceof UnrecoverableError)) throw new UnrecoverableError(describe(error));
    throw error;
  }
}

/** One run of an export, from wherever its record stands. Exposed for tests: it needs no BullMQ job. */
export async function runExport(input: {
  exportId: string;
  jobId: string;
  request: ExportRequest;
  store: ExportStore;
  deps: ExportDeps;
  pager?: Partial<PagerOptions>;
  onPage?: () => void;
}): Promise<ExportResult> {
  const { exportId, request, store, deps } = input;
  const log = deps.logger.child({ exportId });
  const outDir = request.outDir ?? exportsDirOf(deps.dataDir);
  let record = await store.get(exportId);
  if (!record) {
    const startedAt = Date.now();
    await mkdir(outDir, { recursive: true });
    const base = await chooseBase(outDir, fileStamp(startedAt), exportId, (b) => store.claimName(path.join(outDir, b), exportId));
    record = await store.open({ id: exportId, jobId: input.jobId, format: request.format, gzip: request.gzip, outDir, keep: request.keep, base, startedAt });
  }
  if (record.status === 'done' && record.file && record.manifest) {
    return { exportId, file: record.file, manifest: record.manifest, count: record.count ?? 0, complete: record.complete ?? false };
  }
  // outDir: without --out, the file goes to the data dir of the worker that writes it, like results files.
  await store.update(exportId, { status: 'running', outDir, resumedPages: record.pagesDone, runs: record.runs + 1 });
  log.info({ resumedPages: record.pagesDone, run: record.runs + 1 }, record.pagesDone > 0 ? 'export resumed' : 'export started');

  const spool = openSpool(spoolDirOf(exportsDirOf(deps.dataDir), exportId));
  const stale = await pruneSpools(exportsDirOf(deps.dataDir), FAILED_RETENTION_SECONDS * 1000, exportId);
  if (stale.length > 0) log.info({ stale }, 'removed the spools of exports abandoned for the failed-job retention');
  const options: PagerOptions = {
    pageSize: SEARCH_PAGE_SIZE,
    concurrency: EXPORT_DEFAULTS.concurrency,
    maxRounds: EXPORT_DEFAULTS.maxRounds,
    pageAttempts: EXPORT_DEFAULTS.pageAttempts,
    backoff: PAGE_RETRY_BACKOFF,
    ...input.pager,
  };
  const file = { dir: outDir, name: exportFileName(record.base, record.format, record.gzip), format: record.format, gzip: record.gzip, bom: deps.csvBom };
  // A run that reads every page itself rebuilds the customer index on the way (a resumed run has not seen them all).
  const rebuild = deps.customers && record.pagesDone === 0 ? await indexRebuild(deps.customers, log) : undefined;
  let sink = await openExportFile(file);
  const inOrder = createInOrderWriter({ sink, spool, pageSize: options.pageSize });
  let paging: PagingOutcome;
  let written: WrittenFile;
  let duplicates: number;
  try {
    paging = await readEverything({
      exportId,
      api: deps.api,
      budget: deps.budget,
      store,
      spool,
      logger: log,
      options,
      format: record.format,
      onPage: input.onPage,
      onRead: (read) => inOrder.offer(read),
      onCustomers: rebuild?.add,
    });
    await store.update(exportId, { phase: 'writing' });
    const head = await inOrder.settle();
    const kept = keepsHead(paging, head);
    log.info({ pagesWrittenWhilePaging: head?.pages.length ?? 0, kept }, kept ? 'export file: the pages written while paging stand' : 'export file: written again from the spool');
    if (!kept) {
      await sink.abort();
      sink = await openExportFile(file);
    }
    duplicates = await writeRest(paging, spool, sink, kept ? (head?.pages.length ?? 0) : 0);
    written = await sink.finish();
    await spool.close();
  } catch (error) {
    await inOrder.settle().catch(() => undefined);
    await sink.abort();
    await spool.close();
    await rebuild?.abandon();
    throw error;
  }

  const full = paging.mode === 'full' ? paging.listings[0] : undefined;
  let complete = paging.listings.every((l) => l.state.complete);
  if (full?.state.startProven) {
    // Proven by the customers of the start: the file holds at least those, and whatever came after that was met.
    if (written.count < (full.state.totalAtStart ?? 0)) {
      complete = false;
      await store.warn(exportId, 'count', `${written.count} customers written, but TotalItemCount was ${full.state.totalAtStart ?? '?'} at the start`);
    }
  } else if (full && written.count !== full.state.latest) {
    complete = false;
    await store.warn(exportId, 'count', `${written.count} customers written, but TotalItemCount was ${full.state.latest ?? '?'} at the end`);
  }
  const pruned = record.keep === undefined ? [] : await pruneExports(outDir, record.keep, record.base);
  // Complete, one listing: every customer present at the start is in the index, as of then.
  // Its end is read on from position `count` only when the file's customers are the listing's first `count` (no page missing or short before the last).
  if (complete && full) await rebuild?.commit({ startedAt: record.startedAt, count: written.count, ascending: full.ascending && withoutGaps(full, options.pageSize) });
  else await rebuild?.abandon();

  const finishedAt = Date.now();
  const counters = (await store.get(exportId)) ?? record;
  const manifest = manifestOf({ record: counters, paging, written, complete, pruned, finishedAt, duplicates, warnings: await store.warnings(exportId) });
  const manifestPath = await writeManifest(outDir, record.base, manifest);
  await store.finish(exportId, { file: written.path, manifest: manifestPath, count: written.count, complete, finishedAt });
  await spool.remove();
  log.info({ file: written.path, count: written.count, complete, durationMs: manifest.durationMs }, 'export written');
  return { exportId, file: written.path, manifest: manifestPath, count: written.count, complete };
}

/**
 * The customer index, rebuilt from the customers an export reads: a new
 * generation, switched in only when the export is complete (every customer
 * present at its start, once). Index writes that fail leave the index as it
 * was; they never fail the export.
 */
async function indexRebuild(index: CustomerIndex, log: Logger) {
  const previous = await index.meta();
  let build: IndexBuild | undefined;
  try {
    build = await index.beginBuild(previous?.total ?? 0, [...DEFAULT_INDEXED_FIELDS, ...(previous?.fields ?? [])]);
  } catch (error) {
    log.warn({ err: error }, 'the customer index is not rebuilt by this export');
    return undefined;
  }
  let broken = false;
  let lastId: string | undefined;
  return {
    add: async (customers: readonly Customer[]): Promise<void> => {
      if (broken || !build) return;
      for (const { CustomerID } of customers) if (lastId === undefined || compareIds(CustomerID, lastId) > 0) lastId = CustomerID;
      try {
        await index.addToBuild(build, customers);
      } catch (error) {
        broken = true;
        log.warn({ err: error }, 'the customer index is not rebuilt by this export');
      }
    },
    abandon: async (): Promise<void> => {
      if (build) await index.abandon(build).catch(() => undefined);
    },
    commit: async (listing: { startedAt: number; count: number; ascending: boolean }): Promise<void> => {
      if (!build) return;
      if (broken) {
        await index.abandon(build).catch(() => undefined);
        return;
      }
      try {
        await index.commit(build, {
          builtAt: listing.startedAt,
          refreshedAt: listing.startedAt,
          total: listing.count,
          lastId: lastId ?? '',
          count: listing.count,
          appendOnly: listing.ascending,
        });
      } catch (error) {
        // Redis came back without some of the build's writes (or failed): the index stays as it was.
        log.warn({ err: error }, 'the customer index is not rebuilt by this export');
        await index.abandon(build).catch(() => undefined);
        return;
      }
      log.info({ customers: listing.count }, 'customer index rebuilt from the export');
    },
  };
}

/**
 * Whether a listing's pages are 0..k-1, each full but the last: the
 * customers written held positions 0..count-1. A listing proven by the
 * customers of the start (pager.ts `coversStart`) may lack a page of the
 * customers added meanwhile, or hold one read short.
 */
function withoutGaps(listing: PagedListing, pageSize: number): boolean {
  return listing.pages.every((page, i) => page.index === i && (i === listing.pages.length - 1 || page.meta.n === pageSize));
}

const sameLocation = (a: SpoolLocation | undefined, b: SpoolLocation): boolean => a !== undefined && a.f === b.f && a.o === b.o && a.b === b.b;

/**
 * Whether the pages written while paging (inOrder.ts) are the head of the
 * file as it must be: one full listing whose CustomerIDs ascend throughout
 * (nothing to de-duplicate), and each page written is the read paging
 * settled on.
 */
function keepsHead(paging: PagingOutcome, head: WrittenPrefix | undefined): boolean {
  const only = paging.mode === 'full' && paging.listings.length === 1 ? paging.listings[0] : undefined;
  if (!head || !only?.ascending) return false;
  return head.pages.every((loc, i) => {
    const page = only.pages[i];
    return page?.index === i && sameLocation(locationOf(page.meta), loc);
  });
}

/**
 * Writes every listing's pages after the first `skip` (already in the file)
 * in page order, each CustomerID once; returns the records dropped as
 * repeats. Only one page is in memory at a time; the CustomerIDs written are
 * remembered only when they could repeat (partitioned, or pages not in ID
 * order).
 */
async function writeRest(paging: PagingOutcome, spool: Spool, sink: ExportFileSink, skip: number): Promise<number> {
  const needSeen = paging.listings.length > 1 || paging.listings.some((l) => !l.ascending);
  const seen = new Set<string>();
  let duplicates = 0;
  const where = (listing: number, { index, meta }: StoredPage): SpoolLocation => {
    const loc = locationOf(meta);
    if (!loc) throw new Error(`page ${listing}:${index} has no spool record`);
    return loc;
  };
  for (const { listing, pages } of paging.listings) {
    for (const page of listing === 0 ? pages.slice(skip) : pages) {
      if (!needSeen) {
        await sink.write(await spool.readBody(listing, page.index, where(listing, page)), page.meta.n);
        continue;
      }
      const { ids, rows } = await spool.read(listing, page.index, where(listing, page));
      let text = '';
      let n = 0;
      ids.forEach((id, i) => {
        if (seen.has(id)) {
          duplicates++;
          return;
        }
        seen.add(id);
        text += rows[i] ?? '';
        n++;
      });
      if (n > 0) await sink.write(text, n);
    }
  }
  return duplicates;
}

function manifestOf(input: {
  record: ExportRecord;
  paging: PagingOutcome;
  written: { path: string; count: number; bytes: number; sha256: string };
  complete: boolean;
  pruned: string[];
  finishedAt: number;
  duplicates: number;
  warnings: string[];
}): ExportManifest {
  const { record, paging, written } = input;
  const listings = paging.listings;
  const full = paging.mode === 'full' ? listings[0] : undefined;
  const drifted = listings.filter((l) => l.state.round > 1 || !l.state.complete || l.state.reasons.length > 0);
  const label = (contains: string): string => (paging.mode === 'full' ? '' : `search "${contains}": `);
  const rereads = listings.reduce((n, l) => n + l.state.reread.length + (l.state.round - 1), 0);
  return {
    exportId: record.id,
    file: exportFileName(record.base, record.format, record.gzip),
    format: record.format,
    gzip: record.gzip,
    fields: CUSTOMER_FIELDS,
    count: written.count,
    totalItemCount: { atStart: full?.state.totalAtStart ?? null, atEnd: full?.state.latest ?? null },
    complete: input.complete,
    sha256: written.sha256,
    bytes: written.bytes,
    startedAt: new Date(record.startedAt).toISOString(),
    finishedAt: new Date(input.finishedAt).toISOString(),
    durationMs: input.finishedAt - record.startedAt,
    pages: { read: record.pagesDone, reread: rereads, resumed: record.resumedPages },
    requests: record.requests,
    retries: record.retries,
    rateLimited: record.rateLimited,
    runs: record.runs,
    mode: paging.mode,
    ...(paging.mode === 'partitioned'
      ? {
          partitions: listings.map((l) => ({
            contains: l.state.contains,
            totalAtStart: l.state.totalAtStart ?? null,
            totalAtEnd: l.state.latest ?? null,
            complete: l.state.complete,
          })),
        }
      : {}),
    drift:
      drifted.length === 0
        ? null
        : {
            rounds: Math.max(...drifted.map((l) => l.state.round)),
            reread: drifted.map((l) => `${label(l.state.contains)}${formatPages(l.state.reread) || 'none'}`).join('; '),
            reasons: drifted.flatMap((l) => l.state.reasons.map((reason) => `${label(l.state.contains)}${reason}`)),
            added: addedAfterStart(full, written.count, input.complete),
          },
    duplicatesDropped: input.duplicates,
    pruned: input.pruned,
    warnings: input.warnings,
  };
}

/**
 * Customers written that were created after the export began: those met past
 * the start count. Known only for a complete full listing (every customer of
 * the start is in the file once, so the rest came later); null otherwise.
 */
function addedAfterStart(full: PagedListing | undefined, count: number, complete: boolean): number | null {
  const atStart = full?.state.totalAtStart;
  return complete && atStart !== undefined ? Math.max(0, count - atStart) : null;
}

function describe(error: unknown): string {
  if (error instanceof ApiError) return error.reason;
  return error instanceof Error ? error.message : String(error);
}
