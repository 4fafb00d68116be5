import { buildCardUpdate } from '../src/csv/rows.js';
import type { RowProcessor } from './types.js';

/** `paymentMethod.update`: PUT /json/paymentmethods/{key}; idempotent, retried plainly. */
export const paymentMethodUpdate: RowProcessor = async (ctx) => {
  const { paymentMethodKey, body } = buildCardUpdate(ctx.plan, ctx.cells, ctx.options);
  const answer = await ctx.api.updatePaymentMethod(paymentMethodKey, body);
  return { status: 'updated', paymentMethodKey: answer.PaymentMethodKey };
};
