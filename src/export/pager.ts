/**
 * Pages every customer out of `GET /json/customers` (DESIGN section 5), with
 * offset paging made trustworthy:
 *
 * 1. A listing's first page gives TotalItemCount; its other pages are read
 *    concurrently (p-limit), every request drawing from the fleet-wide API
 *    budget through the client. Each finished page goes to the spool and is
 *    recorded in Redis before anything else happens, so a killed run resumes
 *    from exactly the pages it had finished.
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
 * 4. After EXPORT_DEFAULTS.maxRounds rounds the listing is left incomplete and
 *    the manifest says so: never a silently short or doubled file.
 *
 * What offset paging cannot see: a removal and a creation that happen
 * together between two page reads leave every count as it was. The interface
 * offers no snapshot or cursor to do better.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pLimit from 'p-limit';
import type { Logger } from 'pino';
import type { ApiClient } from '../api/client.js';
import { ApiError, ApiRateLimitedError, ApiRefusedError } from '../api/errors.js';
import type { SearchCustomersResponse } from '../api/schemas/index.js';
import { EXPORT_DEFAULTS } from '../policy.js';
import type { ApiBudget } from '../queue/budget.js';
import { fullJitterBackoff, type BackoffBounds } from '../queue/queues.js';
import type { Spool } from './spool.js';
import { pageKey, type ExportMode, type ExportStore, type ListingState, type PageMeta } from './state.js';

/** When a 429 gives no Retry-After, everyone waits this long. */
const DEFAULT_RATE_LIMIT_WAIT_MS = 1_000;

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
  /** Told after each finished page read (for job progress). */
  onPage?: () => void;
}

/** One listing as paging left it: what to assemble, in order. */
export interface PagedListing {
  listing: number;
  state: ListingState;
  /** The pages that make up the listing at its final count, in order (a page missing when rounds ran out is left out). */
  pages: number[];
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

/** Numeric-text CustomerIDs compared as numbers, without a length limit. */
export function compareIds(a: string, b: string): number {
  const x = a.replace(/^0+(?=\d)/, '');
  const y = b.replace(/^0+(?=\d)/, '');
  if (x.length !== y.length) return x.length - y.length;
  return x < y ? -1 : x > y ? 1 : 0;
}

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

/** Thrown inside paging when the service refuses an empty `contains` (the listing falls back to partitions). */
class EmptySearchRefused extends Error {
  constructor(readonly refusal: ApiRefusedError) {
    super(refusal.message);
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
export async function readEverything(ctx: PagerContext): Promise<PagingOutcome> {
  const { exportId, store, spool, options, logger } = ctx;
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
    outcome.push({ listing: index, state: final, pages: range(0, count).filter((p) => pages.has(p)), ascending: ascendsThroughout(pages, count) });
  }
  return { mode, listings: outcome };
}

/** A page recorded as finished whose file is not on this machine is read again (and said so). */
async function dropPagesWithoutFiles(ctx: PagerContext, listings: ReadonlyMap<number, ListingState>): Promise<void> {
  const lost: string[] = [];
  for (const listing of listings.keys()) {
    for (const page of (await ctx.store.pages(ctx.exportId, listing)).keys()) {
      if (!(await ctx.spool.has(listing, page))) lost.push(pageKey(listing, page));
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
async function readListing(ctx: PagerContext, listing: number, initial: ListingState): Promise<ListingState> {
  const { exportId, store, options } = ctx;
  let state = initial;
  const save = async (next: ListingState, planned = 0): Promise<void> => {
    state = next;
    await store.saveListing(exportId, listing, next, planned);
  };

  if (state.done) return state;
  if (state.totalAtStart === undefined) {
    // A run killed between finishing the first page and saving the plan finds it stored.
    const first = (await store.pages(exportId, listing)).get(0) ?? (await readPage(ctx, listing, state.contains, 0, 1, true));
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
      const probe = await readPage(ctx, listing, state.contains, last, round, false);
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
async function countDuplicates(ctx: PagerContext, listing: number, pages: ReadonlyMap<number, PageMeta>, pageCount: number): Promise<number> {
  const seen = new Set<string>();
  let duplicates = 0;
  for (const index of range(0, pageCount)) {
    if (!pages.has(index)) continue;
    for (const customer of await ctx.spool.read(listing, index)) {
      if (seen.has(customer.CustomerID)) duplicates++;
      else seen.add(customer.CustomerID);
    }
  }
  return duplicates;
}

/** Reads pages concurrently; on the first failure the rest are not started, those in flight finish, and it throws. */
async function readPages(ctx: PagerContext, listing: number, contains: string, pages: readonly number[], round: number): Promise<void> {
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
  if (failure) throw failure.error;
}

/** Reads one page (with its retries), spools it, then records it as finished. */
async function readPage(ctx: PagerContext, listing: number, contains: string, page: number, round: number, first: boolean): Promise<PageMeta> {
  let answer: SearchCustomersResponse;
  try {
    answer = await fetchPage(ctx, contains, page);
  } catch (error) {
    if (first && contains === '' && error instanceof ApiRefusedError) throw new EmptySearchRefused(error);
    throw error;
  }
  await ctx.spool.write(listing, page, answer.Customers);
  const meta = await ctx.store.savePage(ctx.exportId, listing, page, {
    n: answer.Customers.length,
    t: answer.TotalItemCount,
    r: round,
    ...describeIds(answer.Customers.map((c) => c.CustomerID)),
  });
  ctx.onPage?.();
  return meta;
}

/**
 * One search request with the export's own retries: a 429 blocks the fleet's
 * budget for its Retry-After and waits without spending an attempt; other
 * transient failures back off with full jitter up to `pageAttempts`; a
 * permanent refusal is thrown at once.
 */
async function fetchPage(ctx: PagerContext, contains: string, page: number): Promise<SearchCustomersResponse> {
  const { api, budget, store, exportId, options } = ctx;
  for (let attempt = 1; ; ) {
    try {
      await store.increment(exportId, 'requests');
      return await api.searchCustomers({ contains, skip: page * options.pageSize, take: options.pageSize });
    } catch (error) {
      if (error instanceof ApiRateLimitedError) {
        await store.increment(exportId, 'rateLimited');
        await budget.block(error.retryAfterMs ?? DEFAULT_RATE_LIMIT_WAIT_MS);
        continue;
      }
      if (error instanceof ApiError && error.transient && attempt < options.pageAttempts) {
        await store.increment(exportId, 'retries');
        ctx.logger.info({ exportId, contains, page, attempt, err: error }, 'export page failed; retrying');
        await sleep(fullJitterBackoff(attempt, error.retryAfterMs, options.backoff));
        attempt++;
        continue;
      }
      throw error;
    }
  }
}
