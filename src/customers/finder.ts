/**
 * Finding the customers an upsert's rows (`--match FIELD`) update, at the
 * fewest requests, planned once per import by what the service reports:
 *
 * - **index**: the index names each row's customer (no request); the row
 *   reads that record (GET) to lay its columns over it. About one GET per
 *   existing row.
 * - **scan**: every customer is paged once (TotalItemCount / 100 requests,
 *   which also rebuilds the index), and the records of the import's
 *   customers are kept as they pass: no GET at all. Chosen when a scan costs
 *   fewer requests than the GETs, or when there is no index to use.
 * - **search**: without an index, when a scan costs more than a search per
 *   row: each row searches by its last name, as before the index.
 *
 * The producer stores the digests of the rows' match values; one worker
 * plans (a lock per import) while the others wait for its plan. Records kept
 * by a scan are deleted when the import settles (ImportStore.forgetFinding).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import type { ApiClient } from '../api/client.js';
import { CustomerSchema, type Customer } from '../api/schemas/index.js';
import { SEARCH_PAGE_SIZE } from '../policy.js';
import type { RedisClient } from '../redis/redis.js';
import type { CustomerIndex, IndexMeta } from './customerIndex.js';
import { digestOf, fieldKey, identityKey, normalizeEmail, normalizeText } from './identity.js';
import { currentIndex, refreshFull, type RefreshDeps } from './refresh.js';
import { INDEX_FRESH_MS } from './guard.js';
import { searchPage } from './search.js';
import { storeKeys } from '../redis/keys.js';

export type UpsertStrategy = 'index' | 'scan' | 'search';

export interface UpsertPlan {
  strategy: UpsertStrategy;
  /** Rows whose match value the index knew when planning (the GETs of `index`). */
  known: number;
  /** Search requests the plan costs (a scan's pages; 0 for index). */
  pages: number;
  at: number;
}

/** How long a plan's lock is held at most (a scan of a large base runs under it). */
const PLAN_LOCK_MS = 15 * 60_000;
const PLAN_WAIT_MS = 100;

/** The match field's value as compared. */
export const matchValue = (field: string, value: string): string => (field === 'EmailAddress' ? normalizeEmail(value) : normalizeText(value));

export interface CustomerFinder {
  /** The plan of an import's upserts (made once, by the first row that asks). */
  plan(importId: string, field: string, api: Pick<ApiClient, 'searchCustomers'>): Promise<UpsertPlan>;
  /**
   * The customers whose `field` equals `value`, as records to lay a row over:
   * by the plan's way; undefined when the plan is a search (the caller
   * searches by name).
   */
  matches(importId: string, field: string, value: string, api: Pick<ApiClient, 'getCustomer' | 'searchCustomers'>): Promise<Customer[] | undefined>;
  /** After subsync changed a customer: the index follows (its keys may have moved). */
  updated(before: Customer, after: Customer): Promise<void>;
}

export function createCustomerFinder(deps: { redis: RedisClient; prefix: string; index: CustomerIndex; refresh: RefreshDeps; now?: () => number }): CustomerFinder {
  const now = deps.now ?? Date.now;
  const storeKeysOf = storeKeys(deps.prefix);
  const keys = (importId: string) => ({
    matchDigests: storeKeysOf.matchDigests(importId),
    plan: storeKeysOf.findPlan(importId),
    lock: storeKeysOf.findPlanLock(importId),
    records: storeKeysOf.foundRecords(importId),
  });
  const plans = new Map<string, Promise<UpsertPlan>>();

  async function stored(importId: string): Promise<UpsertPlan | undefined> {
    const hash = await deps.redis.hgetall(keys(importId).plan);
    if (hash.strategy !== 'index' && hash.strategy !== 'scan' && hash.strategy !== 'search') return undefined;
    return { strategy: hash.strategy, known: Number(hash.known ?? 0), pages: Number(hash.pages ?? 0), at: Number(hash.at ?? 0) };
  }

  /** How many of the import's match digests the index holds. */
  async function knownRows(meta: IndexMeta, importId: string, field: string): Promise<number> {
    if (!meta.fields.includes(field)) return 0;
    const digests = await deps.redis.smembersBuffer(keys(importId).matchDigests);
    let known = 0;
    for (let first = 0; first < digests.length; first += 1000) {
      const found = await deps.index.lookupDigests(meta, field, digests.slice(first, first + 1000));
      known += found.filter((ids) => ids.length > 0).length;
    }
    return known;
  }

  async function decide(importId: string, field: string, refresh: RefreshDeps): Promise<UpsertPlan> {
    const k = keys(importId);
    const rows = await deps.redis.scard(k.matchDigests);
    const meta = await currentIndex(refresh, now() - INDEX_FRESH_MS);
    const total = meta?.total ?? (await searchPage(refresh, { contains: '', skip: 0, take: 1 })).TotalItemCount;
    const scanPages = Math.ceil(total / SEARCH_PAGE_SIZE) + 1;
    if (meta?.fields.includes(field)) {
      const known = await knownRows(meta, importId, field);
      if (known <= scanPages) return { strategy: 'index', known, pages: 0, at: now() };
    } else if (scanPages > rows) {
      // A search per row (a request or more each) costs less than reading every customer.
      return { strategy: 'search', known: 0, pages: 0, at: now() };
    }
    await scan(importId, field, refresh);
    return { strategy: 'scan', known: 0, pages: scanPages, at: now() };
  }

  /** Pages every customer (rebuilding the index, with `field` among its keys) and keeps the import's customers' records. */
  async function scan(importId: string, field: string, refresh: RefreshDeps): Promise<void> {
    const k = keys(importId);
    const wanted = new Set((await deps.redis.smembersBuffer(k.matchDigests)).map((d) => d.toString('hex')));
    await refreshFull(
      {
        ...refresh,
        onCustomers: async (customers) => {
          const kept: string[] = [];
          for (const customer of customers) {
            const value = customer[field as keyof Customer];
            if (typeof value === 'string' && wanted.has(digestOf(fieldKey(field, value)).toString('hex'))) kept.push(customer.CustomerID, JSON.stringify(customer));
          }
          if (kept.length > 0) await deps.redis.hset(k.records, ...kept);
        },
      },
      [field],
    );
  }

  async function planOnce(importId: string, field: string, refresh: RefreshDeps): Promise<UpsertPlan> {
    const k = keys(importId);
    const token = randomBytes(8).toString('hex');
    for (;;) {
      const done = await stored(importId);
      if (done) return done;
      if ((await deps.redis.set(k.lock, token, 'PX', PLAN_LOCK_MS, 'NX')) === 'OK') {
        try {
          const plan = await decide(importId, field, refresh);
          await deps.redis.hset(k.plan, { strategy: plan.strategy, known: String(plan.known), pages: String(plan.pages), at: String(plan.at) });
          return plan;
        } finally {
          if ((await deps.redis.get(k.lock)) === token) await deps.redis.del(k.lock);
        }
      }
      await sleep(PLAN_WAIT_MS);
    }
  }

  const finder: CustomerFinder = {
    plan(importId, field, api) {
      let plan = plans.get(importId);
      if (!plan) {
        // Its requests count for the row that plans (its import's figures).
        plan = planOnce(importId, field, { ...deps.refresh, api });
        plans.set(importId, plan);
        // A failed plan is made again by the next row.
        plan.catch(() => plans.delete(importId));
      }
      return plan;
    },

    async matches(importId, field, value, api) {
      const plan = await finder.plan(importId, field, api);
      if (plan.strategy === 'search') return undefined;
      const meta = await currentIndex({ ...deps.refresh, api }, now() - INDEX_FRESH_MS);
      if (!meta?.fields.includes(field)) return undefined;
      const [ids = []] = await deps.index.lookup(meta, field, [fieldKey(field, value)]);
      const records: Customer[] = [];
      for (const id of ids) {
        const kept = plan.strategy === 'scan' ? await deps.redis.hget(keys(importId).records, id) : null;
        const record = kept === null ? (await api.getCustomer(id)).Customer : CustomerSchema.parse(JSON.parse(kept));
        // The index may be behind a change made elsewhere: a record whose value moved on is not a match.
        const current = record[field as keyof Customer];
        if (typeof current === 'string' && matchValue(field, current) === matchValue(field, value)) records.push(record);
      }
      // The index named customers that no longer match: it is behind; the caller searches the service.
      return ids.length > 0 && records.length === 0 ? undefined : records;
    },

    async updated(before, after) {
      // A field a build under way keys counts too: the build may have read the customer before this update.
      if (identityKey(before) !== identityKey(after) || (await deps.index.keyedFields()).some((f) => before[f as keyof Customer] !== after[f as keyof Customer])) {
        await deps.index.replace(before, after);
      }
    },
  };
  return finder;
}
