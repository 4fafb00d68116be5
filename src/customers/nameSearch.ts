/**
 * Searching the service by name, when there is no index to ask: the search
 * of a name is read once per import and shared by every row of the import
 * that needs it, and each row searches by the more selective of its first
 * and last name, as the service's own TotalItemCount says.
 *
 * Pages are kept in Redis per import (`<prefix>:import:<id>:names`, a hash of
 * `<name>\0<page>` → the page's customers as JSON, and `<name>` → its
 * TotalItemCount), so a search interrupted by a failure resumes from the
 * pages it has, other workers reuse them, and one process reads a name at a
 * time (a lock per name). They are deleted with the import's other finding
 * state when it settles. Only for what existed before a row sends: a
 * read-back after a create searches afresh.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { CustomerSchema, type Customer } from '../api/schemas/index.js';
import { SEARCH_PAGE_SIZE } from '../policy.js';
import type { RedisClient } from '../redis/redis.js';
import { storeKeys } from '../redis/keys.js';
import { INVISIBLE, type Person } from './identity.js';
import { searchPage, type SearchDeps } from './search.js';

const NAME_LOCK_MS = 5 * 60_000;
const NAME_WAIT_MS = 50;
/** Counts of names a process remembers before it forgets them all (they are in Redis too). */
const MAX_REMEMBERED_COUNTS = 100_000;

export interface NameSearch {
  /**
   * Every customer whose first or last name contains the more selective of
   * the person's two names (the one the service counts fewer customers for).
   */
  customersLike(importId: string, person: Pick<Person, 'FirstName' | 'LastName'>, deps: SearchDeps, options?: { fresh?: boolean }): Promise<Customer[]>;
}

export function createNameSearch(redis: RedisClient, prefix: string): NameSearch {
  const keys = storeKeys(prefix);
  const pageField = (name: string, page: number): string => `${name}\u0000${page}`;

  /** Page `page` of the search for `name`, from Redis or the service (then kept). */
  async function page(importId: string, name: string, index: number, deps: SearchDeps): Promise<{ customers: Customer[]; total: number }> {
    const hash = keys.nameSearches(importId);
    const [kept, total] = await redis.hmget(hash, pageField(name, index), name);
    if (typeof kept === 'string' && typeof total === 'string') return { customers: parseCustomers(kept), total: Number(total) };
    const answer = await searchPage(deps, { contains: name, skip: index * SEARCH_PAGE_SIZE, take: SEARCH_PAGE_SIZE });
    // The count of the first page read stands for the search: later pages read at another count are read as they are.
    await redis.hset(hash, pageField(name, index), JSON.stringify(answer.Customers), ...(typeof total === 'string' ? [] : [name, String(answer.TotalItemCount)]));
    return { customers: answer.Customers, total: typeof total === 'string' ? Number(total) : answer.TotalItemCount };
  }

  /** Every page of the search for `name`, read now (a read-back: what was kept predates the create). */
  async function fresh(name: string, deps: SearchDeps): Promise<Customer[]> {
    const found: Customer[] = [];
    for (let skip = 0; ; skip += SEARCH_PAGE_SIZE) {
      const answer = await searchPage(deps, { contains: name, skip, take: SEARCH_PAGE_SIZE });
      found.push(...answer.Customers);
      if (answer.Customers.length < SEARCH_PAGE_SIZE || skip + SEARCH_PAGE_SIZE >= answer.TotalItemCount) return found;
    }
  }

  /** Runs `work` holding the lock of one name's search of one import: one process reads a name at a time. */
  async function locked<T>(importId: string, name: string, work: () => Promise<T>): Promise<T> {
    const lock = `${keys.nameSearches(importId)}:lock:${name}`;
    const token = randomBytes(8).toString('hex');
    while ((await redis.set(lock, token, 'PX', NAME_LOCK_MS, 'NX')) !== 'OK') await sleep(NAME_WAIT_MS);
    try {
      return await work();
    } finally {
      if ((await redis.get(lock)) === token) await redis.del(lock);
    }
  }

  // The count of each name, per import, asked of Redis or the service once per process.
  const counts = new Map<string, Promise<number>>();
  function countOf(importId: string, name: string, deps: SearchDeps): Promise<number> {
    const key = `${importId}\u0000${name}`;
    let count = counts.get(key);
    if (!count) {
      if (counts.size >= MAX_REMEMBERED_COUNTS) counts.clear();
      count = locked(importId, name, async () => (await page(importId, name, 0, deps)).total);
      counts.set(key, count);
      count.catch(() => counts.delete(key));
    }
    return count;
  }

  /** Every page of the search for `name`: one process reads what is missing, the others wait for it. */
  function all(importId: string, name: string, deps: SearchDeps): Promise<Customer[]> {
    return locked(importId, name, async () => {
      const first = await page(importId, name, 0, deps);
      const found = [...first.customers];
      for (let index = 1; index * SEARCH_PAGE_SIZE < first.total; index++) {
        const next = await page(importId, name, index, deps);
        found.push(...next.customers);
        if (next.customers.length < SEARCH_PAGE_SIZE) break;
      }
      return found;
    });
  }

  return {
    async customersLike(importId, person, deps, options = {}) {
      const names = [...new Set([person.LastName, person.FirstName].map(searchText).filter((n) => n !== ''))];
      if (names.length === 0) return [];
      if (options.fresh) return freshLike(importId, names, deps);
      // The first page of each gives its count (and is the search's own first page).
      const totals = await settledAll(names.map(async (name) => ({ name, total: await countOf(importId, name, deps) })));
      const chosen = totals.reduce((best, next) => (next.total < best.total ? next : best));
      return all(importId, chosen.name, deps);
    },
  };

  /**
   * A read-back: the more selective name by the counts the import already
   * has (no request), else by reading the first page of each now; its pages
   * read now, the first page reused when it holds them all.
   */
  async function freshLike(importId: string, names: readonly string[], deps: SearchDeps): Promise<Customer[]> {
    const known = await redis.hmget(keys.nameSearches(importId), ...names);
    if (known.every((total) => typeof total === 'string')) {
      const chosen = names.reduce((best, name, i) => (Number(known[i]) < Number(known[names.indexOf(best)]) ? name : best));
      return fresh(chosen, deps);
    }
    const firsts = await settledAll(names.map(async (name) => ({ name, answer: await searchPage(deps, { contains: name, skip: 0, take: SEARCH_PAGE_SIZE }) })));
    const chosen = firsts.reduce((best, next) => (next.answer.TotalItemCount < best.answer.TotalItemCount ? next : best));
    return chosen.answer.Customers.length < SEARCH_PAGE_SIZE ? chosen.answer.Customers : fresh(chosen.name, deps);
  }
}

/**
 * Every search of the names, awaited to its end before the first failure is
 * thrown: a search still retrying must not outlive the read-back that
 * started it (it would send after the row has moved on).
 */
async function settledAll<T>(searches: ReadonlyArray<Promise<T>>): Promise<T[]> {
  const ended = await Promise.allSettled(searches);
  const failed = ended.find((e): e is PromiseRejectedResult => e.status === 'rejected');
  if (failed) throw failed.reason;
  return ended.map((e) => (e as PromiseFulfilledResult<T>).value);
}

/** A name as searched: as written, but for invisible characters and runs of spaces (the service's case rules are its own). */
function searchText(name: string): string {
  return name.normalize('NFC').replace(INVISIBLE, '').replace(/\s+/g, ' ').trim();
}

function parseCustomers(text: string): Customer[] {
  const parsed: unknown = JSON.parse(text);
  return Array.isArray(parsed) ? parsed.map((c) => CustomerSchema.parse(c)) : [];
}
