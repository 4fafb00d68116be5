import type { Customer } from '../src/api/schemas/index.js';
import { buildCustomerInput } from '../src/csv/rows.js';
import { searchAll } from './reconcile.js';
import { overlayAndPut } from './customerUpdate.js';
import { createdBy, guardCreate } from './guard.js';
import type { ReadBack, RowContext, RowProcessor } from './types.js';

/** The customers whose match field equals the row's, found by last name. */
async function matchesOf(ctx: RowContext): Promise<{ field: string; matches: Customer[] }> {
  const wanted = buildCustomerInput(ctx.plan, ctx.cells);
  const field = ctx.options.match ?? 'EmailAddress';
  const value = fieldText(wanted, field);
  const matches = (await searchAll(ctx, wanted.LastName.trim())).filter((c) => fieldText(c, field) === value);
  return { field, matches };
}

const fieldText = (record: object, field: string): string => String(Object.entries(record).find(([key]) => key === field)?.[1] ?? '').trim().toLowerCase();

/** Whether this row's create happened: a match that did not exist before the first attempt. */
export const readBackUpsert: ReadBack = async (ctx) => {
  const { field, matches } = await matchesOf(ctx);
  const before = new Set(ctx.preexisting ?? []);
  const created = matches.filter((c) => !before.has(c.CustomerID));
  const [only] = created;
  if (created.length === 1 && only) {
    return { status: 'reconciled', customerId: only.CustomerID, note: `the create had been applied before its answer was lost; ${field} matched a customer that did not exist before` };
  }
  if (created.length > 1) {
    return { status: 'needs-review', candidates: created.map((c) => c.CustomerID), note: `the create may have been applied, and ${created.length} new customers match ${field}` };
  }
  return undefined;
};

/**
 * `customer.upsert` (`--match FIELD`): search by last name, keep the
 * customers whose match field equals the row's; one is updated, none means
 * create, several need review. The matches found before the first attempt are
 * recorded, so when a create's answer is lost a later new match is proven to
 * be the one this row created.
 */
export const customerUpsert: RowProcessor = async (ctx) => {
  if (ctx.previous === 'sent' && ctx.preexisting !== undefined) {
    const verdict = await readBackUpsert(ctx);
    if (verdict) return verdict;
  }
  const { field, matches } = await matchesOf(ctx);
  if (ctx.preexisting === undefined) await ctx.recordPreexisting(matches.map((c) => c.CustomerID));
  const [existing] = matches;
  if (matches.length > 1) {
    return { status: 'needs-review', candidates: matches.map((c) => c.CustomerID), note: `${matches.length} customers match ${field}; not updated` };
  }
  if (existing) return overlayAndPut(ctx, existing);
  const body = buildCustomerInput(ctx.plan, ctx.cells);
  // Nothing matched the field; the person may still exist under another value of it.
  const held = ctx.previous === 'sent' ? undefined : await guardCreate(ctx, body);
  if (held) return held;
  await ctx.markSent();
  const { CustomerID } = await ctx.api.createCustomer(body);
  await createdBy(ctx, CustomerID, body);
  return { status: 'created', customerId: CustomerID };
};
