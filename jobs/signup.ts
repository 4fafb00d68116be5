import { buildSignupRequest } from '../src/csv/rows.js';
import { findCreated, reconciliation } from './reconcile.js';
import type { RowProcessor } from './types.js';

/**
 * `signup`: POST /json/signups, which creates the customer, the subscription
 * and the payment method in one call; reconciled by its customer first when
 * an earlier attempt may have applied.
 */
export const signup: RowProcessor = async (ctx) => {
  const body = buildSignupRequest(ctx.plan, ctx.cells, ctx.options);
  if (ctx.previous === 'sent') {
    const verdict = reconciliation(await findCreated(ctx.api, body.Customer), 'the sign-up');
    if (verdict?.status === 'reconciled') {
      // The interface has no way to read a customer's subscriptions back.
      return { ...verdict, subscriptionId: '', note: `${verdict.note ?? ''}; its SubscriptionID cannot be read back through the API, so it is left empty` };
    }
    if (verdict) return verdict;
  }
  await ctx.markSent();
  const { CustomerID, SubscriptionID } = await ctx.api.signUp(body);
  return { status: 'signed-up', customerId: CustomerID, subscriptionId: SubscriptionID };
};
