import { buildSignupRequest } from '../src/csv/rows.js';
import { createdBy, guardCreate } from './guard.js';
import { holdersNow, reconciliation } from './reconcile.js';
import type { ReadBack, RowProcessor } from './types.js';

/**
 * Whether this row's sign-up happened, read back by its customer. The
 * interface has no way to read a customer's subscriptions, so a reconciled
 * sign-up has an empty SubscriptionID and a note saying so.
 */
export const readBackSignup: ReadBack = async (ctx) => {
  const body = buildSignupRequest(ctx.plan, ctx.cells, ctx.options);
  const verdict = reconciliation(await holdersNow(ctx, body.Customer), 'the sign-up');
  if (verdict?.status !== 'reconciled') return verdict;
  return { ...verdict, subscriptionId: '', note: `${verdict.note ?? ''}; its SubscriptionID cannot be read back through the API, so it is left empty` };
};

/**
 * `signup`: POST /json/signups, which creates the customer, the subscription
 * and the payment method in one call; reconciled by its customer first when
 * an earlier attempt may have applied.
 */
export const signup: RowProcessor = async (ctx) => {
  const body = buildSignupRequest(ctx.plan, ctx.cells, ctx.options);
  const verdict = ctx.previous === 'sent' ? await readBackSignup(ctx) : await guardCreate(ctx, body.Customer);
  if (verdict) return verdict;
  await ctx.markSent();
  const { CustomerID, SubscriptionID } = await ctx.api.signUp(body);
  await createdBy(ctx, CustomerID, body.Customer);
  return { status: 'signed-up', customerId: CustomerID, subscriptionId: SubscriptionID };
};
