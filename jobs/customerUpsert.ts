import type { Customer } from '../src/api/schemas/index.js';
import { buildCustomerInput } from '../src/csv/rows.js';
import { searchAll } from './reconcile.js';
import { overlayAndPut } from './customerUpdate.js';
import type { RowProcessor } from './types.js';

/**
 * `customer.upsert` (`--match FIELD`): search by last name, keep the
 * customers whose match field equals the row's; one is updated, none means
 * create, several need review. The matches found before the first attempt are
 * recorded, so when a create's answer is lost a later new match is proven to
 * be the one this row created.
 */
export const customerUpsert: RowProcessor = async (ctx) => {
  const wanted = buildCustomerInput(ctx.plan, ctx.cells);
  const field = ctx.options.match ?? 'EmailAddress';
  const value = String(wanted[field as keyof typeof wanted] ?? '').trim().toLowerCase();
  const matches = (await searchAll(ctx.api, wanted.LastName.trim())).filter(
    (c: Customer) => String(c[field as keyof Customer] ?? '').trim().toLowerCase() === value,
  );

  if (ctx.previous === 'sent' && ctx.preexisting !== undefined) {
    const before = new Set(ctx.preexisting);
    const created = matches.filter((c) => !before.has(c.CustomerID));
    const [only] = created;
    if (created.length === 1 && only) {
      return { status: 'reconciled', customerId: only.CustomerID, note: `the create had been applied before its answer was lost; ${field} matched a customer that did not exist before` };
    }
    if (created.length > 1) {
      return { status: 'needs-review', candidates: created.map((c) => c.CustomerID), note: `the create may have been applied, and ${created.length} new customers match ${field}` };
    }
  } else if (ctx.preexisting === undefined) {
    await ctx.recordPreexisting(matches.map((c) => c.CustomerID));
  }

  const [existing] = matches;
  if (matches.length > 1) {
    return { status: 'needs-review', candidates: matches.map((c) => c.CustomerID), note: `${matches.length} customers match ${field}; not updated` };
  }
  if (existing) return overlayAndPut(ctx, existing);
  await ctx.markSent();
  const { CustomerID } = await ctx.api.createCustomer(wanted);
  return { status: 'created', customerId: CustomerID };
};
