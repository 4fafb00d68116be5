import { buildCustomerInput } from '../src/csv/rows.js';
import { createdBy, guardCreate } from './guard.js';
import { holdersNow, reconciliation } from './reconcile.js';
import type { ReadBack, RowProcessor } from './types.js';

/** Whether this row's create happened: reads the customer back by name and email. */
export const readBackCustomer: ReadBack = async (ctx) => reconciliation(await holdersNow(ctx, buildCustomerInput(ctx.plan, ctx.cells)), 'the create');

/** `customer.create`: POST /json/customers, reconciling first when an earlier attempt may have applied. */
export const customerCreate: RowProcessor = async (ctx) => {
  const body = buildCustomerInput(ctx.plan, ctx.cells);
  const verdict = ctx.previous === 'sent' ? await readBackCustomer(ctx) : await guardCreate(ctx, body);
  if (verdict) return verdict;
  // Marked before the request leaves: a crash after this line reconciles instead of re-creating.
  await ctx.markSent();
  const { CustomerID } = await ctx.api.createCustomer(body);
  await createdBy(ctx, CustomerID, body);
  return { status: 'created', customerId: CustomerID };
};
