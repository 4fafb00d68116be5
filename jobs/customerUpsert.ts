import type { Customer, CustomerInput } from '../src/api/schemas/index.js';
import { matchValue } from '../src/customers/finder.js';
import { buildCustomerInput } from '../src/csv/rows.js';
import { customersLike, holdersNow, reconciliation } from './reconcile.js';
import { overlayAndPut } from './customerUpdate.js';
import { createdBy, guardCreate } from './guard.js';
import type { ReadBack, RowContext, RowProcessor } from './types.js';

const fieldOf = (ctx: RowContext): string => ctx.options.match ?? 'EmailAddress';
const textOf = (record: object, field: string): string => {
  const value: unknown = Object.entries(record).find(([key]) => key === field)?.[1];
  return typeof value === 'string' ? value : '';
};

/**
 * The customers whose match field equals the row's: by the import's plan
 * (the index, with the records a scan kept or a GET each), else by a search
 * of the more selective of the row's names (the import's shared one; read
 * afresh for a read-back).
 */
async function matchesOf(ctx: RowContext, wanted: CustomerInput, options: { fresh: boolean }): Promise<Customer[]> {
  const field = fieldOf(ctx);
  const value = textOf(wanted, field);
  const planned = options.fresh ? undefined : await ctx.finder?.matches(ctx.importId, field, value, ctx.api);
  if (planned) return planned;
  return (await customersLike(ctx, wanted, options)).filter((c) => matchValue(field, textOf(c, field)) === matchValue(field, value));
}

/**
 * Whether this row's create happened. With the duplicate guard, whoever
 * holds the row's person now was created by it (see holdersNow); without
 * it, a match that did not exist before the first attempt.
 */
export const readBackUpsert: ReadBack = async (ctx) => {
  const wanted = buildCustomerInput(ctx.plan, ctx.cells);
  if (ctx.guard) return reconciliation(await holdersNow(ctx, wanted), 'the create');
  if (ctx.preexisting === undefined) return undefined;
  const field = fieldOf(ctx);
  const before = new Set(ctx.preexisting);
  const created = (await matchesOf(ctx, wanted, { fresh: true })).filter((c) => !before.has(c.CustomerID));
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
 * `customer.upsert` (`--match FIELD`): the customer whose match field equals
 * the row's is updated (or left unchanged), none means create, several need
 * review. Without the duplicate guard, the matches found before the first
 * attempt are recorded, so a later new match is proven to be this row's.
 */
export const customerUpsert: RowProcessor = async (ctx) => {
  const wanted = buildCustomerInput(ctx.plan, ctx.cells);
  if (ctx.previous === 'sent') {
    const verdict = await readBackUpsert(ctx);
    if (verdict) return verdict;
  }
  const field = fieldOf(ctx);
  const matches = await matchesOf(ctx, wanted, { fresh: false });
  if (!ctx.guard && ctx.preexisting === undefined) await ctx.recordPreexisting(matches.map((c) => c.CustomerID));
  const [existing] = matches;
  if (matches.length > 1) {
    return { status: 'needs-review', candidates: matches.map((c) => c.CustomerID), note: `${matches.length} customers match ${field}; not updated` };
  }
  if (existing) return overlayAndPut(ctx, existing);
  // Nothing matched the field; the person may still exist under another value of it.
  const held = ctx.previous === 'sent' ? undefined : await guardCreate(ctx, wanted);
  if (held) return held;
  await ctx.markSent();
  const { CustomerID } = await ctx.api.createCustomer(wanted);
  await createdBy(ctx, CustomerID, wanted);
  return { status: 'created', customerId: CustomerID };
};
