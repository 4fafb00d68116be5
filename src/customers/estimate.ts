/**
 * What an import will cost in requests, for `import --dry-run`: the same
 * choices the workers make (customerIndex.ts, guard.ts, finder.ts), made
 * from the index and the counts the service reports, without sending
 * anything but a read of the end of the listing (or, with no index, the
 * first page of it, for TotalItemCount).
 */
import type { ApiClient } from '../api/client.js';
import type { JobName } from '../outcomes.js';
import { SEARCH_PAGE_SIZE } from '../policy.js';
import type { CustomerIndex, IndexMeta } from './customerIndex.js';
import { digestOf, normalizeText, type Person } from './identity.js';
import { currentIndex, type RefreshDeps } from './refresh.js';
import { searchPage } from './search.js';

/** The plan of an import and its cost, by kind of request. */
export interface RequestEstimate {
  /** How the rows that must find customers find them. */
  strategy: 'index' | 'scan' | 'search' | 'none';
  searches: number;
  reads: number;
  creates: number;
  /** Updates (PUT); a row whose customer already holds its values sends none. */
  updates: number;
  /** Creates whose person the index already holds: they settle `exists`, unsent. */
  exist: number;
  total: number;
  /** What the estimate could not see (no index and no API, say). */
  notes: string[];
}

interface Pending {
  name: JobName;
  identity: Buffer | undefined;
  match: Buffer | undefined;
}

const LOOKUP_BATCH = 1000;
/** Distinct names an estimate keeps count of; past it the estimate says "at least". */
const MAX_NAMES = 1_000_000;

/**
 * Collects the valid rows of a file (`add`), looking their keys up in the
 * index in batches as they come, and ends with the estimate (`finish`).
 */
export function createEstimator(input: { index: CustomerIndex | undefined; refresh: Omit<RefreshDeps, 'api' | 'index'> | undefined; api: Pick<ApiClient, 'searchCustomers'> | undefined; match: string | undefined; guard: boolean }) {
  let meta: IndexMeta | undefined;
  let ready: Promise<void> | undefined;
  const pending: Pending[] = [];
  const counts = { creates: 0, exist: 0, guarded: 0, upsertKnown: 0, upsertNew: 0, updates: 0, cards: 0 };
  const notes: string[] = [];
  const names = new Set<string>();

  async function open(): Promise<void> {
    if (!input.index) return;
    meta = input.api && input.refresh ? await currentIndex({ ...input.refresh, index: input.index, api: input.api }, Date.now()) : await input.index.meta();
    if (meta && !meta.appendOnly) meta = undefined;
  }

  async function lookUp(batch: readonly Pending[]): Promise<void> {
    const found = async (kind: string, digests: Buffer[]): Promise<boolean[]> =>
      meta && input.index && (kind === 'i' || meta.fields.includes(kind)) ? (await input.index.lookupDigests(meta, kind, digests)).map((ids) => ids.length > 0) : digests.map(() => false);
    const identities = await found('i', batch.map((p) => p.identity ?? Buffer.alloc(8)));
    const matches = input.match ? await found(input.match, batch.map((p) => p.match ?? Buffer.alloc(8))) : [];
    batch.forEach((p, i) => {
      if (p.name === 'customer.upsert' && matches[i]) counts.upsertKnown++;
      else if (p.identity && input.guard && identities[i]) counts.exist++;
      else if (p.name === 'customer.upsert') counts.upsertNew++;
      else counts.creates++;
      if (p.identity && input.guard) counts.guarded++;
    });
  }

  return {
    /** One valid row: its job, and the keys it is found by (identity for a create, the match value for an upsert). */
    async add(name: JobName, identityKey: string | undefined, matchKey: string | undefined, person?: Pick<Person, 'FirstName' | 'LastName'>): Promise<void> {
      if (name === 'customer.update') {
        counts.updates++;
        return;
      }
      if (name === 'paymentMethod.update') {
        counts.cards++;
        return;
      }
      pending.push({ name, identity: identityKey === undefined ? undefined : digestOf(identityKey), match: matchKey === undefined ? undefined : digestOf(matchKey) });
      // Without an index, each distinct name is searched once per import (its first page, at least).
      if (person && names.size < MAX_NAMES) for (const n of [person.FirstName, person.LastName]) if (normalizeText(n) !== '') names.add(normalizeText(n));
      if (pending.length >= LOOKUP_BATCH) {
        await (ready ??= open());
        await lookUp(pending.splice(0));
      }
    },

    async finish(): Promise<RequestEstimate> {
      await (ready ??= open());
      await lookUp(pending.splice(0));
      let searches = 0;
      let reads = counts.updates; // An update by CustomerID reads the record it lays itself over.
      let strategy: RequestEstimate['strategy'] = 'none';
      const finding = counts.guarded + counts.upsertKnown + counts.upsertNew;
      if (finding > 0) {
        const total = meta?.total ?? (input.api && input.refresh ? (await searchPage({ ...input.refresh, api: input.api }, { contains: '', skip: 0, take: 1 })).TotalItemCount : undefined);
        const scanPages = total === undefined ? undefined : Math.ceil(total / SEARCH_PAGE_SIZE) + 1;
        if (meta) {
          // A delta or two while the rows run: the index is read again when older than a few seconds.
          searches += 1;
          if (counts.upsertKnown > 0 && scanPages !== undefined && scanPages < counts.upsertKnown) {
            strategy = 'scan';
            searches += scanPages;
          } else {
            strategy = 'index';
            reads += counts.upsertKnown;
          }
        } else if (scanPages !== undefined && scanPages <= finding) {
          strategy = 'scan';
          searches += scanPages;
          notes.push('no current customer index: the first rows build it by paging every customer; which rows exist is known only then');
        } else {
          strategy = 'search';
          searches += Math.min(finding * 2, Math.max(names.size, 1));
          notes.push(
            scanPages === undefined
              ? 'no customer index and no SUBSYNC_API_URL: the rows that must find their customers search by name, each distinct name once (a page or more each)'
              : 'no customer index, and paging every customer costs more: the rows search by name, each distinct name once (a page each, common names more)',
          );
        }
      }
      const creates = counts.creates + counts.upsertNew;
      const updates = counts.updates + counts.upsertKnown + counts.cards;
      return { strategy, searches, reads, creates, updates, exist: counts.exist, total: searches + reads + creates + updates, notes };
    },
  };
}

/** The estimate as the dry run prints it; `rate` is SUBSYNC_RATE when set. */
export function describeEstimate(estimate: RequestEstimate, rate: number | undefined): string {
  const time = rate ? `; at SUBSYNC_RATE=${rate} that is about ${formatDuration(estimate.total / rate)}` : '';
  return (
    `plan: about ${estimate.total} requests: ${estimate.searches} searches, ${estimate.reads} reads, ${estimate.creates} creates, ` +
    `${estimate.updates} updates (rows whose customer already holds their values send none), ${estimate.exist} exist already (not sent)${time}`
  );
}

function formatDuration(seconds: number): string {
  if (seconds < 90) return `${Math.max(1, Math.round(seconds))} s`;
  if (seconds < 90 * 60) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
