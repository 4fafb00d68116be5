import type { Customer } from '../src/api/schemas/index.js';
import { identityKey, type Person } from '../src/customers/identity.js';
import { searchPage } from '../src/customers/search.js';
import { SEARCH_PAGE_SIZE } from '../src/policy.js';
import type { RowContext, RowOutcome } from './types.js';

/** The identifying fields compared when reading a create back: first name, last name and email. */
export type Identity = Person;

/**
 * Every customer whose first or last name contains `text`, all pages; each
 * page (an idempotent GET) retried on its own, so one failed page does not
 * fail the whole read.
 */
export async function searchAll(ctx: Pick<RowContext, 'api' | 'budget'>, text: string): Promise<Customer[]> {
  const found: Customer[] = [];
  for (let skip = 0; ; skip += SEARCH_PAGE_SIZE) {
    const page = await searchPage(ctx, { contains: text, skip, take: SEARCH_PAGE_SIZE });
    found.push(...page.Customers);
    if (page.Customers.length < SEARCH_PAGE_SIZE || skip + SEARCH_PAGE_SIZE >= page.TotalItemCount) return found;
  }
}

/** Whether a customer is this person (names and email compared as identity.ts normalises them). */
export function hasIdentity(customer: Customer, who: Identity): boolean {
  return identityKey(customer) === identityKey(who);
}

/**
 * Reads a possibly-applied create back: the CustomerIDs of the customers
 * that carry the row's first name, last name and email now. With the
 * duplicate guard on, nobody held this person when the row first sent (or
 * the row would have settled `exists`), so whoever holds it now was created
 * by this row: the guard reads the index after a delta of the newest
 * customers, about one request for every row reading back at that moment.
 * Without it (`--allow-duplicates`), a search by the more selective name.
 */
export async function holdersNow(ctx: RowContext, who: Identity): Promise<string[]> {
  if (ctx.guard) return ctx.guard.readBack(who, ctx.api, ctx.importId);
  return (await customersLike(ctx, who, { fresh: true })).filter((c) => hasIdentity(c, who)).map((c) => c.CustomerID);
}

/**
 * The customers whose first or last name holds the more selective of the
 * person's names; the import's shared search, or (`fresh`, for a read-back)
 * read now. Without a name search (tests of a bare processor), by last name.
 */
export async function customersLike(ctx: RowContext, who: Pick<Identity, 'FirstName' | 'LastName'>, options: { fresh: boolean }): Promise<Customer[]> {
  if (!ctx.names) return searchAll(ctx, who.LastName.trim());
  return ctx.names.customersLike(ctx.importId, who, ctx, options);
}

/**
 * The verdict on a possibly-applied create, or undefined when nothing was
 * found and the create must be sent again.
 */
export function reconciliation(found: readonly string[], what: string): RowOutcome | undefined {
  const [only] = found;
  if (found.length === 1 && only) {
    return { status: 'reconciled', customerId: only, note: `${what} had been applied before its answer was lost; found by reading back` };
  }
  if (found.length > 1) {
    return {
      status: 'needs-review',
      candidates: [...found],
      note: `${what} may have been applied, and ${found.length} customers match it (${found.join(', ')}); not sent again`,
    };
  }
  return undefined;
}
