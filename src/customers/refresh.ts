/**
 * Keeping the customer index current, at the fewest requests:
 *
 * - A **full refresh** pages every customer (`contains=''`, 100 a page, 8 in
 *   flight, each request from the fleet's budget) into a new generation, and
 *   switches to it once the listing is read. When the listing came in
 *   ascending CustomerID order (as the sandbox lists, and as a service that
 *   appends new customers at the end does), the index is marked append-only,
 *   and a delta made right after the switch reads what was created meanwhile
 *   (the creates answered while the build ran wrote into the generation it
 *   replaced).
 * - A **delta** then reads only the end of the listing: the page at
 *   `total - 1` must still start with the last customer the index knows (else
 *   customers were removed or inserted in the middle, and only a full refresh
 *   will do), and every customer after it is new. One request when nothing
 *   was created; one more per 100 new customers. That is also how a create
 *   whose answer was lost is found again: it is one of the newest customers.
 *   Each page's customers are written into the index as the page is read;
 *   the index's end moves once the whole delta is read.
 *
 * One process at a time runs a delta (a lock in Redis); the others wait for
 * its result, so a burst of rows that each need a current index costs one
 * read of the end of the listing, not one each.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pLimit from 'p-limit';
import type { Customer, SearchCustomersResponse } from '../api/schemas/index.js';
import { compareIds } from './search.js';
import { SEARCH_PAGE_SIZE } from '../policy.js';
import { GATHER_MS, SETTLE_GATHER_MS } from '../redis/coalesce.js';
import type { RedisClient } from '../redis/redis.js';
import { DEFAULT_INDEXED_FIELDS, READ_TO_END_FIRST, type CustomerIndex, type IndexMeta, type OpenBuild } from './customerIndex.js';
import { searchPage, type SearchDeps } from './search.js';

/** Pages read at once by a full refresh, as the export does. */
const FULL_REFRESH_CONCURRENCY = 8;
/** How long a delta's lock is held at most (a process that dies holding it lets go after this). */
const DELTA_LOCK_MS = 30_000;
/** How long a full build's lock is held at most; it is renewed by nothing, so it covers a large base. */
const BUILD_LOCK_MS = 10 * 60_000;
/** How often a process waiting for another's delta looks again. */
const DELTA_WAIT_MS = 50;
/**
 * How long a process waiting for another's full build first waits before it
 * looks again; each look waits half as long again, up to BUILD_WAIT_MAX_MS.
 * A small base is built in tens of ms, a large one in minutes.
 */
const BUILD_WAIT_MIN_MS = 10;
const BUILD_WAIT_MAX_MS = 200;

export interface RefreshDeps extends SearchDeps {
  index: CustomerIndex;
  /** For the delta lock: the connection and prefix of the index. */
  redis: RedisClient;
  prefix: string;
  now?: () => number;
  /** Told of every customer a refresh reads (the planner matches its rows against them). */
  onCustomers?: (customers: readonly Customer[]) => void | Promise<void>;
}

export interface RefreshOutcome {
  kind: 'full' | 'delta';
  /** Search requests sent (retries included). */
  requests: number;
  /** Customers read. */
  read: number;
  meta: IndexMeta | undefined;
}

/** Counts the requests a refresh sends, retries included, through a wrapped client. */
function counted(deps: RefreshDeps): { deps: RefreshDeps; requests: () => number } {
  let requests = 0;
  const api = {
    searchCustomers: (query: Parameters<SearchDeps['api']['searchCustomers']>[0]) => {
      requests++;
      return deps.api.searchCustomers(query);
    },
  };
  return { deps: { ...deps, api }, requests: () => requests };
}

/** Whether a run of customers is in ascending CustomerID order, after `previous` when given. */
function ascends(customers: readonly Customer[], previous?: string): boolean {
  let last = previous;
  for (const { CustomerID } of customers) {
    if (last !== undefined && compareIds(CustomerID, last) <= 0) return false;
    last = CustomerID;
  }
  return true;
}

/**
 * Reads the end of the listing after the customer at `from.total - 1`, which
 * must be `from.lastId`. Undefined when it is not (customers were removed or
 * inserted before the end), or when what follows is not in ascending order.
 * After the first page, the pages its count says are there are read up to
 * {@link FULL_REFRESH_CONCURRENCY} at once: one after the other, a delta
 * during a fast import (thousands of creates a second) could not keep up
 * with the end it reads. `onPage` is handed each page's new customers, in
 * the listing's order, once they passed those checks.
 *
 * With `own` (the generation the delta writes into), the pages between the
 * first and the last are not read when they hold only subsync's own creates,
 * which are in the index already: see {@link ownCreatesOnly}. `customers`
 * then holds only the customers read, and `skipped` counts the others.
 */
async function readTail(
  deps: RefreshDeps,
  from: { total: number; lastId: string },
  onPage?: (customers: Customer[]) => Promise<void>,
  own?: { gen: number },
): Promise<{ customers: Customer[]; skipped: number; total: number; lastId: string; startedAt: number } | undefined> {
  const now = deps.now ?? Date.now;
  const startedAt = now();
  const customers: Customer[] = [];
  let skipped = 0;
  let lastId = from.total > 0 ? from.lastId : undefined;
  let skip = Math.max(0, from.total - 1);
  // The listing's length as last answered: the pages below it are full (it only grows at its end).
  let listed = from.total;
  let first = true;
  // Takes one page at `skip`: whether the listing ended with it, or undefined when it breaks the checks.
  const take = async (page: SearchCustomersResponse): Promise<boolean | undefined> => {
    let records = page.Customers;
    if (first && from.total > 0) {
      if (records[0]?.CustomerID !== from.lastId) return undefined;
      records = records.slice(1);
    }
    first = false;
    if (!ascends(records, lastId)) return undefined;
    customers.push(...records);
    lastId = records.at(-1)?.CustomerID ?? lastId;
    if (onPage && records.length > 0) await onPage(records);
    if (page.Customers.length < SEARCH_PAGE_SIZE) {
      // The count the last page gave must be the old one plus what was read, or something moved meanwhile.
      return page.TotalItemCount === from.total + skipped + customers.length ? true : undefined;
    }
    listed = Math.max(listed, page.TotalItemCount);
    skip += SEARCH_PAGE_SIZE;
    return false;
  };
  const result = () => ({ customers, skipped, total: from.total + skipped + customers.length, lastId: lastId ?? from.lastId, startedAt });
  for (;;) {
    const count = Math.min(FULL_REFRESH_CONCURRENCY, Math.max(1, Math.ceil((listed - skip) / SEARCH_PAGE_SIZE)));
    const pages = await Promise.all(Array.from({ length: count }, async (_, i) => searchPage(deps, { contains: '', skip: skip + i * SEARCH_PAGE_SIZE, take: SEARCH_PAGE_SIZE })));
    const wasFirst = first;
    for (const page of pages) {
      const ended = await take(page);
      if (ended === undefined) return undefined;
      if (ended) return result();
    }
    if (wasFirst && own && lastId !== undefined && listed - skip > SEARCH_PAGE_SIZE) {
      const last = await ownCreatesOnly(deps, own.gen, { skip, listed, after: lastId });
      if (last) {
        skipped += last.skip - skip;
        skip = last.skip;
        const ended = await take(last.page);
        if (ended === undefined) return undefined;
        if (ended) return result();
      }
    }
  }
}

/**
 * Reads the listing's last page (from `listed - 99`) and answers it when the
 * stretch between `skip` and it holds subsync's own creates and nothing
 * else, so need not be read. The listing is in ascending CustomerID order,
 * and customers are never removed (the service's interface removes none;
 * a removal before the end makes the first page's check fail): the stretch
 * is then exactly the customers with IDs between `after` (the last one
 * read) and the last page's first. Every own create in that range is a
 * customer of the listing, so in the stretch; as many of them as the
 * stretch is long means the stretch is they. A create whose answer was
 * lost, or a customer made elsewhere, leaves it longer: then undefined, and
 * the stretch is read (the last page's request is the cost, unless too few
 * own creates are past `after` to fill the stretch: then none is read).
 *
 * A create the service has answered is counted only once its row settles
 * (settles are gathered): during a fast import the newest creates of the
 * listing are not counted yet. A count that comes out short, but not
 * nothing, is taken again {@link OWN_CREATES_RECOUNTS} times,
 * {@link OWN_CREATES_RECOUNT_MS} apart, before the stretch is read.
 */
async function ownCreatesOnly(deps: RefreshDeps, gen: number, at: { skip: number; listed: number; after: string }): Promise<{ skip: number; page: SearchCustomersResponse } | undefined> {
  // One short of a full page, so that this page shows the listing's end (a full one would need one more read).
  const skip = at.listed - SEARCH_PAGE_SIZE + 1;
  const stretch = skip - at.skip;
  // Too few own creates past the last one read to fill the stretch: no request is spent on the last page.
  if ((await settledCount(() => deps.index.ownCreatesBetween(gen, at.after), stretch)) < stretch) return undefined;
  const page = await searchPage(deps, { contains: '', skip, take: SEARCH_PAGE_SIZE });
  const before = page.Customers[0]?.CustomerID;
  if (before === undefined || compareIds(before, at.after) <= 0) return undefined;
  const own = await settledCount(() => deps.index.ownCreatesBetween(gen, at.after, before), stretch);
  return own === stretch ? { skip, page } : undefined;
}

/** How many times a short count of own creates is taken again (see {@link ownCreatesOnly}). */
export const OWN_CREATES_RECOUNTS = 3;

/** How long apart: the settles' gathering and one call more. */
export const OWN_CREATES_RECOUNT_MS = SETTLE_GATHER_MS + GATHER_MS;

/** `count`, taken again while it comes out short of `target` but not nothing; the last count. */
async function settledCount(count: () => Promise<number | undefined>, target: number): Promise<number> {
  for (let recounts = 0; ; recounts++) {
    const counted = (await count()) ?? 0;
    if (counted >= target || counted === 0 || recounts >= OWN_CREATES_RECOUNTS) return counted;
    await sleep(OWN_CREATES_RECOUNT_MS);
  }
}

/**
 * Opens a build, then reads the listing's first page: opened first, so
 * updates from before that read are kept for it. A failed read abandons it.
 */
async function openWithFirstPage(deps: RefreshDeps, fields: readonly string[]): Promise<{ open: OpenBuild; page: SearchCustomersResponse }> {
  const open = await deps.index.openBuild(fields);
  try {
    return { open, page: await searchPage(deps, { contains: '', skip: 0, take: SEARCH_PAGE_SIZE }) };
  } catch (error) {
    await deps.index.abandon(open).catch(() => undefined);
    throw error;
  }
}

/** The fields a full build indexes beside the identity: the default ones, the index's, and `fields`. */
const buildFields = (previous: IndexMeta | undefined, fields: readonly string[]): string[] => [...DEFAULT_INDEXED_FIELDS, ...(previous?.fields ?? []), ...fields];

/**
 * Pages every customer into a new generation of the index and switches to
 * it. `fields` are indexed beside the identity (with those the index had).
 */
export async function refreshFull(input: RefreshDeps, fields: readonly string[] = [], firstPage?: { page: SearchCustomersResponse; at: number; open: OpenBuild }): Promise<RefreshOutcome> {
  const { deps, requests } = counted(input);
  const now = deps.now ?? Date.now;
  const builtAt = firstPage?.at ?? now();
  const previous = await deps.index.meta();
  const { open, page: first } = firstPage ?? (await openWithFirstPage(deps, buildFields(previous, fields)));
  const total = first.TotalItemCount;
  const build = deps.index.sized(open, total);
  const pageCount = Math.ceil(total / SEARCH_PAGE_SIZE);
  let appendOnly = false;
  let committedAt = 0;
  try {
    const pages = new Map<number, Customer[]>([[0, first.Customers]]);
    const take = async (index: number, customers: Customer[]): Promise<void> => {
      pages.set(index, customers);
      await deps.index.addToBuild(build, customers);
      await deps.onCustomers?.(customers);
    };
    await deps.index.addToBuild(build, first.Customers);
    await deps.onCustomers?.(first.Customers);
    const limit = pLimit(FULL_REFRESH_CONCURRENCY);
    await Promise.all(
      Array.from({ length: Math.max(0, pageCount - 1) }, (_, i) => i + 1).map((index) =>
        limit(async () => take(index, (await searchPage(deps, { contains: '', skip: index * SEARCH_PAGE_SIZE, take: SEARCH_PAGE_SIZE })).Customers)),
      ),
    );
    // Ascending throughout (each page and across pages) and as many as the count said: new customers come at the end.
    let last: string | undefined;
    let count = 0;
    appendOnly = true;
    for (let index = 0; index < pageCount; index++) {
      const customers = pages.get(index) ?? [];
      count += customers.length;
      if (!ascends(customers, last)) appendOnly = false;
      last = customers.at(-1)?.CustomerID ?? last;
    }
    if (count < total) appendOnly = false;
    // Several pages are not read at one instant: the index is read to its end (below) before it is relied on.
    committedAt = await deps.index.commit(build, { builtAt, refreshedAt: appendOnly && pageCount > 1 ? READ_TO_END_FIRST : builtAt, total: Math.min(count, total), lastId: last ?? '', count, appendOnly });
  } catch (error) {
    await deps.index.abandon(build).catch(() => undefined);
    throw error;
  }
  // The customers created while the listing was read (one page is read at one instant), and the creates answered
  // meanwhile when they wrote into a generation this one replaced (it is then switched in to be read to its end
  // first), are read now, into this one.
  if (committedAt === READ_TO_END_FIRST) await refreshDelta(deps);
  const meta = await deps.index.meta({ fresh: true });
  return { kind: 'full', requests: requests(), read: meta?.count ?? 0, meta };
}

/**
 * Reads the customers created since the index was last current. Undefined
 * when there is no append-only index to extend, or when the end of the
 * listing shows customers removed or inserted in the middle: then the index
 * is marked stale, and only a full refresh makes it current again.
 */
export async function refreshDelta(input: RefreshDeps): Promise<RefreshOutcome | undefined> {
  const { deps, requests } = counted(input);
  const meta = await deps.index.meta({ fresh: true });
  if (!meta?.appendOnly || meta.refreshedAt === 0) return undefined;
  // Each page's customers go into the index as it is read: a delta during a long import reads tens of thousands
  // (the import's own creates among them), and written all at its end they held Redis and the process that read
  // them for half a second, every row waiting meanwhile. Written early, they are true all the same: the end of
  // the listing moves only once the delta is whole.
  const writes = deps.index.beginDelta();
  // Pages of subsync's own creates are left unread unless every customer read is to be told (onCustomers).
  const tail = await readTail(deps, meta, (customers) => deps.index.addToDelta(writes, customers), deps.onCustomers ? undefined : { gen: meta.gen });
  if (!tail) {
    await deps.index.markStale();
    return undefined;
  }
  // The end moves only from the one read from (a Redis that came back without the delta before keeps its own),
  // and only while Redis holds every customer this delta wrote: else the next delta reads them again.
  await deps.index.moveEnd(writes, { gen: meta.gen, trust: meta.trust, refreshedAt: tail.startedAt, total: tail.total, lastId: tail.lastId, from: meta.lastId, skipped: tail.skipped });
  await deps.onCustomers?.(tail.customers);
  return { kind: 'delta', requests: requests(), read: tail.customers.length, meta: await deps.index.meta({ fresh: true }) };
}

/**
 * Builds the index when that costs fewer requests than the searches it
 * saves: a full refresh reads every customer once (TotalItemCount / 100
 * requests), where a create without an index searches the service by name
 * (a request or more each). `rows` is how many rows would search. The first
 * page read to learn the count is the refresh's own first page. One process
 * builds (a lock); the others wait for it. Undefined when searching is cheaper.
 */
export async function buildIfCheaper(deps: RefreshDeps, rows: number): Promise<IndexMeta | undefined> {
  const lockKey = `${deps.prefix}:cix:build-lock`;
  const token = randomBytes(8).toString('hex');
  for (let waitMs = BUILD_WAIT_MIN_MS; ; waitMs = Math.min(BUILD_WAIT_MAX_MS, waitMs * 1.5)) {
    const meta = await deps.index.meta({ fresh: true });
    if (meta?.appendOnly && meta.refreshedAt > 0) return meta;
    if ((await deps.redis.set(lockKey, token, 'PX', BUILD_LOCK_MS, 'NX')) === 'OK') {
      try {
        const at = (deps.now ?? Date.now)();
        const { open, page } = await openWithFirstPage(deps, buildFields(meta, []));
        if (Math.ceil(page.TotalItemCount / SEARCH_PAGE_SIZE) > rows) {
          // Left, it would only keep updates' moves for a build that never comes, until it expires.
          await deps.index.abandon(open).catch(() => undefined);
          return undefined;
        }
        return (await refreshFull(deps, [], { page, at, open })).meta;
      } finally {
        if ((await deps.redis.get(lockKey)) === token) await deps.redis.del(lockKey);
      }
    }
    await sleep(waitMs);
    // The builder may have found searching cheaper: then so does this process.
    if ((await deps.redis.exists(lockKey)) === 0 && !(await deps.index.meta({ fresh: true }))) return undefined;
  }
}

/**
 * The index, current as of `after` (ms): a delta is read when it is older,
 * by this process or by another that holds the lock (this one then waits for
 * it). Undefined when no usable index exists (none, not append-only, or
 * stale): then the caller searches instead.
 *
 * With `ahead` (the deps to read with, outside any row), an index past half
 * its allowed age has its delta read in the background while it still
 * serves: during a long import the delta (every customer created since,
 * this import's own included) is then never waited for by every row at once.
 */
export async function currentIndex(deps: RefreshDeps, after: number, ahead?: RefreshDeps): Promise<IndexMeta | undefined> {
  for (;;) {
    const meta = await deps.index.meta();
    if (!meta?.appendOnly || meta.refreshedAt === 0) return undefined;
    if (meta.refreshedAt >= after) {
      const now = (deps.now ?? Date.now)();
      if (ahead && meta.refreshedAt < now - (now - after) / 2) readAhead(ahead);
      return meta;
    }
    // One delta, or one wait for another process's, at a time in this process: the rows that find the
    // index too old meanwhile go on once it ends, instead of each polling the lock.
    const background = readingAhead.get(deps.index);
    if (background) {
      await background;
      continue;
    }
    let under = deltaUnderWay.get(deps.index);
    if (!under) {
      under = deltaOrWait(deps).finally(() => deltaUnderWay.delete(deps.index));
      deltaUnderWay.set(deps.index, under);
    }
    if (!(await under)) return undefined;
  }
}

/** This process's delta read or wait for another's, by index (see currentIndex). */
const deltaUnderWay = new WeakMap<object, Promise<boolean>>();

/**
 * Reads the delta under the lock, or, when another process holds it, waits
 * DELTA_WAIT_MS. False when the delta found no usable index (it is then
 * marked stale: only a full refresh makes it current again).
 */
async function deltaOrWait(deps: RefreshDeps): Promise<boolean> {
  const outcome = await deltaUnderLock(deps);
  if (outcome !== 'held') return outcome !== undefined;
  await sleep(DELTA_WAIT_MS);
  return true;
}

/** Reads the delta under the fleet's lock; `held` when another process holds it. */
async function deltaUnderLock(deps: RefreshDeps): Promise<RefreshOutcome | undefined | 'held'> {
  const lockKey = `${deps.prefix}:cix:lock`;
  // (Made only here: every create asks, and nearly all find the index current.)
  const token = randomBytes(8).toString('hex');
  if ((await deps.redis.set(lockKey, token, 'PX', DELTA_LOCK_MS, 'NX')) !== 'OK') return 'held';
  try {
    return await refreshDelta(deps);
  } finally {
    // Released only by its holder: a lock that expired and was taken by another stays theirs.
    if ((await deps.redis.get(lockKey)) === token) await deps.redis.del(lockKey);
  }
}

/** Delta reads this process has under way in the background, by index. */
const readingAhead = new WeakMap<object, Promise<void>>();

/** Reads the delta in the background, once per process at a time, and only while no other process is at it (the lock). */
function readAhead(deps: RefreshDeps): void {
  if (readingAhead.has(deps.index)) return;
  const reading = deltaUnderLock(deps)
    .then(() => undefined)
    // A failed read ahead changes nothing: the index ages, and the row that finds it too old reads the delta itself.
    .catch(() => undefined)
    .finally(() => readingAhead.delete(deps.index));
  readingAhead.set(deps.index, reading);
}
