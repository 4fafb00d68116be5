import { CUSTOMER_INPUT_FIELDS, type Customer, type CustomerInput } from '../src/api/schemas/index.js';
import { buildCustomerInput, cellOf } from '../src/csv/rows.js';
import type { RowContext, RowOutcome, RowProcessor } from './types.js';

/** The update body of a customer as read: everything but CustomerID and CollectionMethod. */
export function asInput(customer: Customer): CustomerInput {
  const { CustomerID: _id, CollectionMethod: _method, ...input } = customer;
  return input;
}

/** Whether two update bodies hold the same values in every member. */
export function sameInput(a: CustomerInput, b: CustomerInput): boolean {
  return CUSTOMER_INPUT_FIELDS.every((field) => a[field] === b[field]);
}

/**
 * Replaces `customer` with the file's columns laid over it. The API's PUT
 * replaces the whole record, so the base is the record as read: a column the
 * file lacks is kept, never blanked by omission. When the overlay changes
 * nothing, nothing is sent (`unchanged`); a Password cell with a value always
 * sends, since the service never shows the stored one. PUT is idempotent:
 * retried plainly, never marked sent.
 */
export async function overlayAndPut(ctx: RowContext, customer: Customer): Promise<RowOutcome> {
  const base = asInput(customer);
  const body = buildCustomerInput(ctx.plan, ctx.cells, base);
  if (sameInput(body, base)) {
    return { status: 'unchanged', customerId: customer.CustomerID, note: 'the customer already holds every value of this row; nothing was sent' };
  }
  const { CustomerID } = await ctx.api.updateCustomer(customer.CustomerID, body);
  await ctx.finder?.updated(customer, { ...customer, ...body });
  return { status: 'updated', customerId: CustomerID };
}

/** `customer.update`: GET the record, overlay the file's columns, PUT it whole. */
export const customerUpdate: RowProcessor = async (ctx) => {
  const customerId = cellOf(ctx.plan, ctx.cells, 'CustomerID') ?? '';
  const { Customer } = await ctx.api.getCustomer(customerId);
  return overlayAndPut(ctx, Customer);
};
