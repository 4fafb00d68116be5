/**
 * Pages every customer out of `GET /json/customers`, with
 * offset paging made trustworthy:
 *
 * 1. A listing's first page gives TotalItemCount; its other pages are read
 *    concurrently (p-limit: a sliding window), every request drawing from the
 *    fleet-wide API budget through the client. Each page is formatted once,
 *    as the export file's rows, and appended to the spool; finished pages are
 *    then recorded in Redis in batches (group commit: one fdatasync of the
 *    spool, then one transaction for every page finished meanwhile), so a
 *    killed run resumes from exactly the pages it had recorded, and the
 *    requests of a page cost no Redis round trip of their own.
 * 2. A round ends with a probe: its last page read once more, whose
 *    TotalItemCount is the count at the end of the round.
 * 3. The pages are checked against that count (`evaluateListing`): each page
 *    as full as the count says, every page read at that count, no CustomerID
 *    twice. When that fails, the affected range is read again in another
 *    round: only the short and missing pages when the evidence says customers
 *    were only added at the end (no page saw a count below the start or above
 *    the end, and CustomerIDs ascend across the whole listing: new customers
 *    land after the old ones); every page otherwise, since an insertion or
 *    removal in the middle shifts every later page by an unknown amount.
 * 4. After EXPORT_DEFAULTS.maxRounds rounds a listing that still does not add
 *    up is judged by what the export promises: every customer present at the
 *    start, exactly once (`coversStart`). With CustomerIDs ascending across
 *    the listing and no count ever below the start count, the service only
 *    appended: positions below the start count never moved. If every one of
 *    those positions was read (pages 0.. as full as the start count says,
 *    each at a count at or above it), the file holds every customer of the start once, and the customers
 *    created meanwhile (an import running beside the export) are written
 *    where they were met and counted as drift, not as a failure.
 *    Otherwise the listing is left incomplete and the manifest says so:
 *    never a silently short or doubled file.
 *
 * What offset paging cannot see: a removal and creations that happen
 * together between two page reads leave every count at or above the one
 * before (an import running beside the export makes that likelier). The interface
 * offers no snapshot or cursor to do better.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pLimit from 'p-limit';
import type { Logger } from 'pino';
import type { ApiClient } from '../api/client.js';
import { ApiRefusedError } from '../api/errors.js';
import type { SearchCustomersResponse } from '../api/schemas/index.js';
import { EXPORT_DEFAULTS } from '../policy.js';
import type { ApiBudget } from '../redis/budget.js';
import type { BackoffBounds } from '../backoff.js';
import { decide } from '../api/decision.js';
import { compareIds } from '../customers/search.js';
import type { ExportFormat } from './request.js';
import type { Spool, SpoolLocation } from './spool.js';
import { pageKey, type ExportMode, type ExportStore, type ListingState, type PageMeta } from './state.js';
import { formatPage } from './writer.js';
import { SubsyncError } from '../errors.js';

export interface PagerOptions {
  /** Records per page: the interface's maximum, 100. */
  pageSize: number;
  /** Page reads in flight at once. Default EXPORT_DEFAULTS.concurrency. */
  concurrency: number;
  /** Default EXPORT_DEFAULTS.maxRounds. */
  maxRounds: number;
  /** Default EXPORT_DEFAULTS.pageAttempts. */
  pageAttempts: number;
  /** Backoff between attempts of a page. */
  backoff: BackoffBounds;
}

export interface PagerContext {
  exportId: string;
  api: Pick<ApiClient, 'searchCustomers'>;
  /** A 429 blocks the whole fleet's budget for its Retry-After. */
  budget: Pick<ApiBudget, 'block'>;
  store: ExportStore;
  spool: Spool;
  logger: Logger;
  options: PagerOptions;
  /** How pages are formatted in the spool: the export file's format. */
  format: ExportFormat;
  /** Told after each batch of finished page reads is recorded (for job progress). */
  onPage?: () => void;
  /** Told of each page read as soon as it is spooled (before it is recorded): the export file is written while paging goes on. */
  onRead?: (read: PageRead) => void;
  /** Told of the customers of each page read (the customer index is rebuilt from a full export). */
  onCustomers?: (customers: SearchCustomersResponse['Customers']) => Promise<void>;
}

/** One page read, as `onRead` is told of it. */
export interface PageRead {
  listing: number;
  contains: string;
  page: number;
  round: number;
  meta: Omit<PageMeta, 's'> & SpoolLocation;
  /** The page's rows, formatted, as the export file takes them. */
  body: Buffer;
}

/** A page as stored at the end: its index in the listing and its meta (where its record is in the spool). */
export interface StoredPage {
  index: number;
  meta: PageMeta;
}

/** One listing as paging left it: what to assemble, in order. */
export interface PagedListing {
  listing: number;
  state: ListingState;
  /** The pages that make up the listing at its final count, in order (a page missing when rounds ran out is left out). */
  pages: StoredPage[];
  /** Its CustomerIDs ascend through those pages, so none can repeat. */
  ascending: boolean;
}

export interface PagingOutcome {
  mode: ExportMode;
  listings: PagedListing[];
}

/**
 * The verdict on a listing's pages at a given count. A consistent listing
 * may still have drifted (`note`): the count moved, but the pages read after
 * the move already hold every customer it added.
 */
export type Verdict = { consistent: true; note?: string } | { consistent: false; reread: number[]; reason: string };

/** `[1,2,3,7]` → `1–3, 7`. */
export function formatPages(pages: readonly number[]): string {
  const parts: string[] = [];
  let i = 0;
  while (i < pages.length) {
    const start = pages[i] ?? 0;
    let end = start;
    while (pages[i + 1] === end + 1) end = pages[++i] ?? end;
    parts.push(start === end ? String(start) : `${start}–${end}`);
    i++;
  }
  return parts.join(', ');
}

const pageCountOf = (total: number, pageSize: number): number => Math.ceil(total / pageSize);
const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);

/** What a page's meta says of its CustomerIDs (state.ts keeps this rather than the IDs). */
export function describeIds(ids: readonly string[]): Pick<PageMeta, 'first' | 'last' | 'asc'> {
  let asc = true;
  for (let i = 1; i < ids.length; i++) if (compareIds(ids[i - 1] ?? '', ids[i] ?? '') >= 0) asc = false;
  return { first: ids[0] ?? null, last: ids[ids.length - 1] ?? null, asc };
}

/**
 * Whether the CustomerIDs of pages 0..pageCount-1 strictly ascend across the
 * whole listing (each page within, and each page after the one before it).
 * When they do, no CustomerID can be on two pages.
 */
export function ascendsThroughout(pages: ReadonlyMap<number, PageMeta>, pageCount: number): boolean {
  let previous: string | null = null;
  for (const index of range(0, pageCount)) {
    const page = pages.get(index);
    if (!page || page.first === null || page.last === null) continue;
    if (!page.asc || (previous !== null && compareIds(previous, page.first) >= 0)) return false;
    previous = page.last;
  }
  return true;
}

/**
 * Checks the stored pages of a listing against its count at the end of a
 * round (`latest`); `totalAtStart` is the count its first page gave, and
 * `duplicates` the number of CustomerIDs found on more than one of pages
 * 0..ceil(latest / pageSize)-1 (0 when they ascend throughout). Pure.
 */
export function evaluateListing(pages: ReadonlyMap<number, PageMeta>, latest: number, totalAtStart: number, pageSize: number, duplicates: number): Verdict {
  const pageCount = pageCountOf(latest, pageSize);
  const expected = (index: number): number => (index < pageCount - 1 ? pageSize : latest - pageSize * (pageCount - 1));
  const missing: number[] = [];
  const short: number[] = [];
  let stale = false;
  let minSeen = Number.POSITIVE_INFINITY;
  let maxSeen = 0;
  for (const index of range(0, pageCount)) {
    const page = pages.get(index);
    if (!page) {
      missing.push(index);
      continue;
    }
    if (page.n !== expected(index)) short.push(index);
    if (page.t !== latest) stale = true;
    minSeen = Math.min(minSeen, page.t);
    maxSeen = Math.max(maxSeen, page.t);
  }
  if (missing.length === 0 && short.length === 0 && !stale && duplicates === 0) return { consistent: true };

  // Only growth, at the end: no page saw fewer customers than at the start or
  // more than at the end, and IDs ascend across the whole listing.
  const ascending = ascendsThroughout(pages, pageCount);
  const onlyAppended = minSeen >= totalAtStart && maxSeen <= latest && ascending && duplicates === 0;
  if (onlyAppended) {
    const reread = [...short, ...missing].sort((a, b) => a - b);
    if (reread.length === 0) {
      return { consistent: true, note: `TotalItemCount grew from ${totalAtStart} to ${latest} while paging; the pages read after it grew hold every customer added` };
    }
    return {
      consistent: false,
      reread,
      reason: `TotalItemCount grew from ${totalAtStart} to ${latest} while paging; customers were added at the end, so pages ${formatPages(reread)} are read again`,
    };
  }
  const why =
    duplicates > 0
      ? `${duplicates} CustomerID(s) came back on two pages (records shifted while paging)`
      : minSeen < totalAtStart || latest < totalAtStart
        ? `TotalItemCount fell from ${totalAtStart} to ${Math.min(minSeen, latest)} while paging (customers removed shift every later page)`
        : !ascending
          ? `TotalItemCount moved from ${totalAtStart} to ${latest} and the listing is not in CustomerID order, so where the change landed is unknown`
          : `the pages do not add up to TotalItemCount ${latest}`;
  return { consistent: false, reread: range(0, pageCount), reason: `${why}; every page is read again` };
}

/**
 * Whether the stored pages prove that every customer present at the start
 * (`totalAtStart` of them) was read, each once, however much the listing grew
 * at its end meanwhile (see the top of this file). Pure.
 *
 * The evidence: no CustomerID twice (`duplicates` 0), IDs ascending across
 * pages 0..ceil(latest / pageSize)-1, so new customers can only land after
 * the old ones; every stored page read at a count from `totalAtStart` to
 * `latest` (a count below the start means a removal, which shifts every
 * later position down; reads in flight together finish in any order, so
 * their counts say nothing of order); and every position below
 * `totalAtStart` on a stored page (no gap). Together: positions below the
 * start count held the same customers throughout, and each was read.
 */
export function coversStart(pages: ReadonlyMap<number, PageMeta>, latest: number, totalAtStart: number, pageSize: number, duplicates: number): boolean {
  if (duplicates > 0 || latest < totalAtStart) return false;
  const pageCount = pageCountOf(latest, pageSize);
  if (!ascendsThroughout(pages, pageCount)) return false;
  const read = range(0, pageCount).flatMap((index) => {
    const page = pages.get(index);
    return page ? [page] : [];
  });
  if (read.some((page) => page.t < totalAtStart || page.t > latest)) return false;
  for (const index of range(0, pageCountOf(totalAtStart, pageSize))) {
    const page = pages.get(index);
    if (!page || page.n < Math.min(pageSize, totalAtStart - index * pageSize)) return false;
  }
  return true;
}

/** Thrown inside paging when the service refuses an empty `contains` (the listing falls back to partitions). */
class EmptySearchRefused extends SubsyncError {
  readonly code = 'EXPORT_EMPTY_SEARCH_REFUSED';
  constructor(readonly refusal: ApiRefusedError) {
    super(refusal.message, { cause: refusal });
  }
}

const newListing = (contains: string): ListingState => ({
  contains,
  round: 1,
  plan: [],
  probed: false,
  done: false,
  complete: false,
  reread: [],
  reasons: [],
});

/**
 * Reads every listing of the export to the end of its rounds, resuming from
 * what Redis and the spool hold, and says which pages make up each listing.
 */
export async function readEverything(input: PagerContext): Promise<PagingOutcome> {
  const ctx: Paging = { ...input, recorder: createRecorder(input) };
  try {
    return await readAll(ctx);
  } finally {
    // Whatever finished before a failure is recorded, so the next run does not read it again.
    await ctx.recorder.flush().catch(() => undefined);
  }
}

async function readAll(ctx: Paging): Promise<PagingOutcome> {
  const { exportId, store, options, logger } = ctx;
  const record = await store.get(exportId);
  if (!record) throw new Error(`export ${exportId} has no record`);
  let mode = record.mode;
  let listings = await store.listings(exportId);
  if (listings.size === 0) {
    await store.saveListing(exportId, 0, newListing(''), 1);
    listings = await store.listings(exportId);
  }
  await dropPagesWithoutFiles(ctx, listings);

  const outcome: PagedListing[] = [];
  for (let index = 0; index < listings.size; index++) {
    const state = listings.get(index);
    if (!state) throw new Error(`export ${exportId}: listing ${index} is missing`);
    let final: ListingState;
    try {
      final = await readListing(ctx, index, state);
    } catch (error) {
      if (!(error instanceof EmptySearchRefused) || mode !== 'full') throw error;
      // The service will not list everyone at once: one search per character,
      // merged by CustomerID when the file is assembled.
      mode = 'partitioned';
      const alphabet = [...EXPORT_DEFAULTS.partitionAlphabet];
      await store.update(exportId, { mode });
      await store.warn(
        exportId,
        'partitioned',
        `the service refused an empty search (${error.refusal.apiMessage ?? error.refusal.message}); exported by searching for each of ` +
          `"${alphabet.join('')}" in turn and keeping each CustomerID once: a customer whose first and last names contain none of these characters is not in the file`,
      );
      logger.warn({ exportId }, 'empty search refused: exporting by partitions');
      for (const [i, contains] of alphabet.entries()) await store.saveListing(exportId, i, newListing(contains), i === 0 ? 0 : 1);
      listings = await store.listings(exportId);
      index = -1;
      outcome.length = 0;
      continue;
    }
    const pages = await store.pages(exportId, index);
    const count = pageCountOf(final.latest ?? 0, options.pageSize);
    const stored = range(0, count).flatMap((p) => {
      const meta = pages.get(p);
      return meta ? [{ index: p, meta }] : [];
    });
    outcome.push({ listing: index, state: final, pages: stored, ascending: ascendsThroughout(pages, count) });
  }
  return { mode, listings: outcome };
}

/** A page recorded as finished whose file is not on this machine is read again (and said so). */
async function dropPagesWithoutFiles(ctx: PagerContext, listings: ReadonlyMap<number, ListingState>): Promise<void> {
  const lost: string[] = [];
  for (const listing of listings.keys()) {
    for (const [page, meta] of await ctx.store.pages(ctx.exportId, listing)) {
      const loc = locationOf(meta);
      if (!loc || !(await ctx.spool.has(loc))) lost.push(pageKey(listing, page));
    }
  }
  if (lost.length === 0) return;
  await ctx.store.forgetPages(ctx.exportId, lost);
  await ctx.store.warn(
    ctx.exportId,
    'spool-lost',
    `${lost.length} page(s) finished by an earlier run had no spool file on this machine (that run was elsewhere, or the spool was cleared) and were read again`,
  );
}

/** Runs one listing's rounds from wherever its saved state stands. */
async function readListing(ctx: Paging, listing: number, initial: ListingState): Promise<ListingState> {
  const { exportId, store, options } = ctx;
  let state = initial;
  const save = async (next: ListingState, planned = 0): Promise<void> => {
    state = next;
    await store.saveListing(exportId, listing, next, planned);
  };

  if (state.done) return state;
  if (state.totalAtStart === undefined) {
    // A run killed between finishing the first page and saving the plan finds it stored.
    const first = (await store.pages(exportId, listing)).get(0) ?? (await readPage(ctx, listing, state.contains, 0, 1, true, true));
    const plan = range(1, pageCountOf(first.t, options.pageSize));
    // The first page and the round's probe are page reads too.
    await save({ ...state, totalAtStart: first.t, latest: first.t, plan }, plan.length + 1);
  }

  for (;;) {
    const round = state.round;
    const stored = await store.pages(exportId, listing);
    const todo = state.plan.filter((page) => stored.get(page)?.r !== round);
    await readPages(ctx, listing, state.contains, todo, round);

    if (!state.probed) {
      const after = await store.pages(exportId, listing);
      let highest = state.latest ?? 0;
      for (const page of after.values()) if (page.r === round) highest = Math.max(highest, page.t);
      const last = Math.max(0, pageCountOf(highest, options.pageSize) - 1);
      const probe = await readPage(ctx, listing, state.contains, last, round, false, true);
      await save({ ...state, latest: probe.t, probed: true });
    }

    const totalAtStart = state.totalAtStart ?? 0;
    const latest = state.latest ?? 0;
    const pages = await store.pages(exportId, listing);
    const pageCount = pageCountOf(latest, options.pageSize);
    const duplicates = ascendsThroughout(pages, pageCount) ? 0 : await countDuplicates(ctx, listing, pages, pageCount);
    const verdict = evaluateListing(pages, latest, totalAtStart, options.pageSize, duplicates);
    if (verdict.consistent) {
      await save({ ...state, done: true, complete: true, reasons: verdict.note === undefined ? state.reasons : [...state.reasons, verdict.note] });
      return state;
    }
    if (round >= options.maxRounds && coversStart(pages, latest, totalAtStart, options.pageSize, duplicates)) {
      // The listing still grows at its end, but the customers of the start are all here, once.
      const note =
        `${verdict.reason}: after ${options.maxRounds} rounds the count still moved, but every customer present at the start (${totalAtStart}) was read, once ` +
        `(CustomerIDs ascending, no count below the start): the customers added since are written where they were met`;
      await save({ ...state, done: true, complete: true, startProven: true, reasons: [...state.reasons, note] });
      return state;
    }
    if (round >= options.maxRounds) {
      await save({ ...state, done: true, complete: false, reasons: [...state.reasons, `${verdict.reason}: not done, ${options.maxRounds} rounds ran out`] });
      await store.warn(
        exportId,
        `incomplete-${listing}`,
        `search "${state.contains}": the service kept changing through ${options.maxRounds} rounds (${verdict.reason}); the file is not proven complete`,
      );
      return state;
    }
    ctx.logger.info({ exportId, listing, round, reread: verdict.reread.length }, `export drift: ${verdict.reason}`);
    await save(
      {
        ...state,
        round: round + 1,
        plan: verdict.reread,
        probed: false,
        reread: [...state.reread, ...verdict.reread],
        reasons: [...state.reasons, verdict.reason],
      },
      verdict.reread.length + 1,
    );
  }
}

/** CustomerIDs on more than one of the listing's pages, read from the spool one page at a time. */
async function countDuplicates(ctx: Paging, listing: number, pages: ReadonlyMap<number, PageMeta>, pageCount: number): Promise<number> {
  const seen = new Set<string>();
  let duplicates = 0;
  for (const index of range(0, pageCount)) {
    const loc = locationOf(pages.get(index));
    if (!loc) continue;
    for (const id of (await ctx.spool.read(listing, index, loc)).ids) {
      if (seen.has(id)) duplicates++;
      else seen.add(id);
    }
  }
  return duplicates;
}

/** Reads pages concurrently; on the first failure the rest are not started, those in flight finish, and it throws. */
async function readPages(ctx: Paging, listing: number, contains: string, pages: readonly number[], round: number): Promise<void> {
  const limit = pLimit(ctx.options.concurrency);
  let failure: { error: unknown } | undefined;
  await Promise.all(
    pages.map((page) =>
      limit(async () => {
        if (failure) return;
        try {
          await readPage(ctx, listing, contains, page, round, false);
        } catch (error) {
          failure ??= { error };
        }
      }),
    ),
  );
  await ctx.recorder.flush();
  if (failure) throw failure.error;
}

/**
 * Reads one page (with its retries), formats and spools it, then hands it to
 * the recorder; `recorded` waits until it is recorded as finished.
 */
async function readPage(ctx: Paging, listing: number, contains: string, page: number, round: number, first: boolean, recorded = false): Promise<Omit<PageMeta, 's'>> {
  let answer: SearchCustomersResponse;
  try {
    answer = await fetchPage(ctx, contains, page);
  } catch (error) {
    if (first && contains === '' && error instanceof ApiRefusedError) throw new EmptySearchRefused(error);
    throw error;
  }
  const rows = formatPage(ctx.format, answer.Customers);
  await ctx.onCustomers?.(answer.Customers);
  const { loc, body } = await ctx.spool.append(listing, page, rows);
  const meta = { n: rows.ids.length, t: answer.TotalItemCount, r: round, ...describeIds(rows.ids), ...loc };
  ctx.recorder.add(listing, page, meta);
  ctx.onRead?.({ listing, contains, page, round, meta, body });
  if (recorded) await ctx.recorder.flush();
  return meta;
}

/** Where a stored page's record is in the spool; undefined when its meta says nothing (an older version recorded it). */
export function locationOf(meta: PageMeta | undefined): SpoolLocation | undefined {
  return meta?.f === undefined || meta.o === undefined || meta.b === undefined ? undefined : { f: meta.f, o: meta.o, b: meta.b };
}

/** The pager's context with its recorder. */
interface Paging extends PagerContext {
  recorder: Recorder;
}

/** Records finished pages (and the requests sent) in batches: see the top of this file. */
interface Recorder {
  add(listing: number, page: number, meta: Omit<PageMeta, 's'>): void;
  /** One more search request sent. */
  countRequest(): void;
  /** Resolves once everything added so far is recorded; throws if recording failed. */
  flush(): Promise<void>;
}

function createRecorder(ctx: PagerContext): Recorder {
  let pending: Array<{ listing: number; page: number; meta: Omit<PageMeta, 's'> }> = [];
  let requests = 0;
  let running: Promise<void> | undefined;
  let failure: { error: unknown } | undefined;

  // One batch at a time; pages finished while it is written make up the next.
  const kick = (): Promise<void> =>
    (running ??= (async () => {
      try {
        while (pending.length > 0 || requests > 0) {
          const batch = pending;
          const sent = requests;
          pending = [];
          requests = 0;
          // The records' bytes are durable before Redis says the pages are finished.
          if (batch.length > 0) await ctx.spool.sync();
          await ctx.store.savePages(ctx.exportId, batch, sent);
          if (batch.length > 0) ctx.onPage?.();
        }
      } catch (error) {
        failure ??= { error };
      } finally {
        running = undefined;
      }
    })());

  return {
    add(listing, page, meta) {
      pending.push({ listing, page, meta });
      void kick();
    },
    countRequest() {
      requests++;
    },
    async flush() {
      while (!failure && (running || pending.length > 0 || requests > 0)) await kick();
      if (failure) throw failure.error;
    },
  };
}

/**
 * One search request with its retries, as the row protocol's decision says
 * (src/api/decision.ts): a 429 blocks the fleet's budget for its
 * Retry-After and goes again without spending an attempt; any other failure
 * but a permanent refusal (an error that is not the API's included) backs off
 * with jitter up to `pageAttempts`; what is left is thrown. A page read
 * applies nothing, so there is nothing to read back.
 */
async function fetchPage(ctx: Paging, contains: string, page: number): Promise<SearchCustomersResponse> {
  const { api, budget, store, exportId, options } = ctx;
  for (let attempt = 1; ; ) {
    try {
      ctx.recorder.countRequest();
      return await api.searchCustomers({ contains, skip: page * options.pageSize, take: options.pageSize });
    } catch (error) {
      const decision = decide(error, { attempt, maxAttempts: options.pageAttempts, backoff: options.backoff });
      if (decision.kind === 'wait-for-budget') {
        await store.increment(exportId, 'rateLimited');
        await budget.block(decision.retryAfterMs);
        continue;
      }
      if (decision.kind === 'retry') {
        await store.increment(exportId, 'retries');
        ctx.logger.info({ exportId, contains, page, attempt, err: error }, 'export page failed; retrying');
        await sleep(decision.delayMs);
        attempt++;
        continue;
      }
      throw error;
    }
  }
}
