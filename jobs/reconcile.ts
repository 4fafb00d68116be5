import type { ApiClient } from '../src/api/client.js';
import type { Customer } from '../src/api/schemas/index.js';
import { SEARCH_PAGE_SIZE } from '../src/policy.js';
import type { RowOutcome } from './types.js';

/** The identifying fields compared when reading a create back (DESIGN section 4). */
export interface Identity {
  FirstName: string;
  LastName: string;
  EmailAddress: string;
}

/** Every customer whose first or last name contains `text`, all pages. */
export async function searchAll(api: ApiClient, text: string): Promise<Customer[]> {
  const found: Customer[] = [];
  for (let skip = 0; ; skip += SEARCH_PAGE_SIZE) {
    const page = await api.searchCustomers({ contains: text, skip, take: SEARCH_PAGE_SIZE });
    found.push(...page.Customers);
    if (page.Customers.length < SEARCH_PAGE_SIZE || skip + SEARCH_PAGE_SIZE >= page.TotalItemCount) return found;
  }
}

const same = (a: string, b: string): boolean => a.trim() === b.trim();
const sameEmail = (a: string, b: string): boolean => a.trim().toLowerCase() === b.trim().toLowerCase();

export function hasIdentity(customer: Customer, who: Identity): boolean {
  return same(customer.FirstName, who.FirstName) && same(customer.LastName, who.LastName) && sameEmail(customer.EmailAddress, who.EmailAddress);
}

/**
 * Reads a possibly-applied create back: the customers (outside `exclude`)
 * that carry the row's first name, last name and email.
 */
export async function findCreated(api: ApiClient, who: Identity, exclude: readonly string[] = []): Promise<Customer[]> {
  const excluded = new Set(exclude);
  return (await searchAll(api, who.LastName.trim())).filter((c) => hasIdentity(c, who) && !excluded.has(c.CustomerID));
}

/**
 * The verdict on a possibly-applied create, or undefined when nothing was
 * found and the create must be sent again.
 */
export function reconciliation(found: readonly Customer[], what: string): RowOutcome | undefined {
  const [only] = found;
  if (found.length === 1 && only) {
    return { status: 'reconciled', customerId: only.CustomerID, note: `${what} had been applied before its answer was lost; found by reading back` };
  }
  if (found.length > 1) {
    const candidates = found.map((c) => c.CustomerID);
    return {
      status: 'needs-review',
      candidates,
      note: `${what} may have been applied, and ${found.length} customers match it (${candidates.join(', ')}); not sent again`,
    };
  }
  return undefined;
}
