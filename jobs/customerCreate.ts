import { buildCustomerInput } from '../src/csv/rows.js';
import { findCreated, reconciliation } from './reconcile.js';
import type { RowProcessor } from './types.js';

/** `customer.create`: POST /json/customers, reconciling first when an earlier attempt may have applied. */
export const customerCreate: RowProcessor = async (ctx) => {
  const body = buildCustomerInput(ctx.plan, ctx.cells);
  if (ctx.previous === 'sent') {
    const verdict = reconciliation(await findCreated(ctx.api, body), 'the create');
    if (verdict) return verdict;
  }
  // Marked before the request leaves: a crash after this line reconciles instead of re-creating.
  await ctx.markSent();
  const { CustomerID } = await ctx.api.createCustomer(body);
  return { status: 'created', customerId: CustomerID };
};
