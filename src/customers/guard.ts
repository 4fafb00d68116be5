/**
 * The duplicate guard of a create (a customer without CustomerID, a sign-up,
 * the create of an upsert): before a row sends a create, it makes sure the
 * service does not hold its person already, and that no other row of any
 * import is creating the same person at that moment.
 *
 * 1. **A claim** on the person's identity in Redis, taken by the row; a
 *    second row (of another import: rows of one file are kept apart by the
 *    producer) that finds it held waits while the holder runs, settles
 *    `exists` when the holder created the person, and takes the claim over
 *    when the holder ended without creating.
 * 2. **The service's customers**: the index when it is current (a delta read
 *    of the newest customers keeps it so, at about one request for all rows
 *    that need it), else a search by the row's last name.
 */
import type { ApiClient } from '../api/client.js';
import type { Customer } from '../api/schemas/index.js';
import type { ImportStore, LedgerEntry } from '../store/importStore.js';
import type { CustomerIndex } from './customerIndex.js';
import { digestOf, freshDigestOf, identityKey, type Person } from './identity.js';
import type { IndexMeta } from './customerIndex.js';
import { buildIfCheaper, currentIndex, type RefreshDeps } from './refresh.js';
import type { NameSearch } from './nameSearch.js';

/** How old the index may be for a create to trust that a person is absent: a delta read is cheap, but not free. */
export const INDEX_FRESH_MS = 30_000;

/** What a claim check found: the claim is this row's, or another row's with what that row became. */
export type ClaimState =
  | { kind: 'mine' }
  | { kind: 'created'; customerId: string; by: string }
  | { kind: 'running'; by: string }
  | { kind: 'uncertain'; by: string; candidates: string[] };

/** A create the guard is to learn: the customer, the person its row asked for, and the row that claimed it. */
export interface LearnedCreate {
  customer: Customer;
  person: Person;
  claimant: string;
  /** The person's identity when the row's guard worked it out already (for its claim). */
  identity?: Identity;
}

/** A person's identity key and its digest, worked out once for a create's claim, index read and index write. */
export interface Identity {
  key: string;
  digest: Buffer;
}

export function identityOf(person: Person): Identity {
  const key = identityKey(person);
  return { key, digest: freshDigestOf(key) };
}

/**
 * What the guard found before a create: the claim, and when it is the
 * row's, the CustomerIDs of the service's customers with the person's
 * identity (when there are any, the claim has been let go: the index
 * answers for the person).
 */
export interface GuardCheck {
  claim: ClaimState;
  holders: string[];
  identity: Identity;
}

export interface CustomerGuard {
  /**
   * Before a create: claims the person for `claimant` (`importId:row`), or
   * says who holds it and what that row became; when the claim is the
   * row's, the CustomerIDs of the service's customers with the person's
   * identity now (the index when it is current, else one built for the
   * import when that is cheaper than a search per row, else a search), the
   * claim let go when there are any. With a current index, the claim and
   * the index read are one Redis call (gathered with the turn's other
   * rows', or with those of `gatherMs` when given), the release in it; the
   * person's identity is worked out once.
   */
  check(person: Person, claimant: string, api: Pick<ApiClient, 'searchCustomers'>, importId: string, gatherMs?: number): Promise<GuardCheck>;
  /**
   * The CustomerIDs of the service's customers with this identity, read so
   * that a create sent before this call is among them (a create whose
   * answer was lost): the index after a delta read of the newest
   * customers, else a search by name whose pages are retried on their own.
   */
  readBack(person: Person, api: Pick<ApiClient, 'searchCustomers'>, importId: string): Promise<string[]>;
  /** After a create: the index learns the customer, and the claim goes (the index answers for it now). */
  created(customer: Customer, person: Person, claimant: string): Promise<void>;
  /** The same for several creates, in one Redis call sent at once (not gathered over the turn). */
  createdAll(creates: ReadonlyArray<LearnedCreate>): Promise<void>;
}

const MINE: ClaimState = { kind: 'mine' };

const same = (person: Person, customer: Customer): boolean => identityKey(person) === identityKey(customer);

export function createCustomerGuard(deps: { index: CustomerIndex; store: ImportStore; refresh: RefreshDeps; names: NameSearch; now?: () => number }): CustomerGuard {
  const now = deps.now ?? Date.now;

  async function claimantEntry(claimant: string): Promise<LedgerEntry | undefined> {
    const split = claimant.lastIndexOf(':');
    const row = Number(claimant.slice(split + 1));
    return Number.isInteger(row) ? deps.store.getRow(claimant.slice(0, split), row) : undefined;
  }

  // Per import, once per process: whether building the index beats searching for its rows.
  const decisions = new Map<string, Promise<IndexMeta | undefined>>();
  /**
   * Who holds the identity, by an index current as of `after`, else by a
   * search of the service (`fresh`: read now, not the import's shared one).
   */
  async function holdersAsOf(person: Person, api: Pick<ApiClient, 'searchCustomers'>, importId: string, asOf: { after: number; fresh: boolean }, identity?: Identity): Promise<string[]> {
    const { after } = asOf;
    // The requests count for the row that made them (its import's figures).
    const refresh = { ...deps.refresh, api };
    // Read ahead with the process's own client: those pages are no row's requests.
    const meta = (await currentIndex(refresh, after, asOf.fresh ? undefined : deps.refresh)) ?? (await decideBuild(importId, after, refresh));
    if (meta) {
      const [ids = []] = await deps.index.lookupDigests(meta, 'i', [identity?.digest ?? digestOf(identityKey(person))]);
      return ids;
    }
    // No index: the service itself, by the more selective of the two names; before a create the
    // search is the import's, shared; a read-back searches afresh.
    const found = await deps.names.customersLike(importId, person, { api, budget: deps.refresh.budget }, { fresh: asOf.fresh });
    return found.filter((customer) => same(person, customer)).map((customer) => customer.CustomerID);
  }

  async function decideBuild(importId: string, after: number, refresh: RefreshDeps): Promise<IndexMeta | undefined> {
    let decision = decisions.get(importId);
    if (!decision) {
      decision = deps.store.rowCount(importId).then((rows) => buildIfCheaper(refresh, rows));
      decisions.set(importId, decision);
      // A failed build is decided again by the next row.
      decision.catch(() => decisions.delete(importId));
    }
    const meta = await decision;
    return meta && (await currentIndex(refresh, after));
  }

  /**
   * What a claim held by another row means for this one: that row's outcome
   * (created, running, uncertain), or undefined when it ended without
   * creating (failed, invalid, …) or its import is gone: then the claim may
   * be taken over.
   */
  async function heldBy(holder: string): Promise<ClaimState | undefined> {
    const entry = await claimantEntry(holder);
    if (entry?.customerId && (entry.status === 'created' || entry.status === 'signed-up' || entry.status === 'reconciled' || entry.status === 'exists')) {
      return { kind: 'created', customerId: entry.customerId, by: holder };
    }
    if (entry && (entry.status === 'pending' || entry.status === 'sent')) return { kind: 'running', by: holder };
    if (entry?.status === 'needs-review') return { kind: 'uncertain', by: holder, candidates: [...(entry.candidates ?? [])] };
    return undefined;
  }

  async function claimOf(identity: Identity, claimant: string): Promise<ClaimState> {
    for (;;) {
      const holder = await deps.index.claimDigest(identity.digest, claimant);
      if (holder === claimant) return MINE;
      const state = await heldBy(holder);
      if (state) return state;
      await deps.index.takeOverDigest(identity.digest, claimant);
    }
  }

  async function release(identity: Identity, claimant: string): Promise<void> {
    if (await deps.index.meta()) await deps.index.releaseDigest(identity.digest, claimant);
  }

  return {
    async check(person, claimant, api, importId, gatherMs) {
      const identity = identityOf(person);
      for (;;) {
        // Read ahead with the process's own client, as holders does.
        const meta = await currentIndex({ ...deps.refresh, api }, now() - INDEX_FRESH_MS, deps.refresh);
        if (!meta) break;
        const found = await deps.index.claimAndLookup(meta, identity.digest, claimant, gatherMs);
        // A meta kept from before a build's switch: read afresh, and asked again.
        if (!found) continue;
        const { holder, ids } = found;
        if (holder === claimant) return { claim: MINE, holders: ids, identity };
        const state = await heldBy(holder);
        if (state) return { claim: state, holders: [], identity };
        await deps.index.takeOverDigest(identity.digest, claimant);
      }
      // No current index: the claim, then the service's customers (by an index built for this import, else a search).
      const claim = await claimOf(identity, claimant);
      if (claim.kind !== 'mine') return { claim, holders: [], identity };
      const holders = await holdersAsOf(person, api, importId, { after: now() - INDEX_FRESH_MS, fresh: false }, identity);
      if (holders.length > 0) await release(identity, claimant);
      return { claim, holders, identity };
    },

    readBack: (person, api, importId) => holdersAsOf(person, api, importId, { after: now(), fresh: true }),

    async created(customer, person, claimant) {
      // Kept when there is no index: the claim, with its row's outcome, is then what tells a later import.
      await deps.index.created(customer, identityKey(person), claimant);
    },

    async createdAll(creates) {
      await deps.index.createdAll(creates.map(({ customer, person, claimant, identity }) => ({ customer, identity: (identity ?? identityOf(person)).digest, claimant })));
    },
  };
}

