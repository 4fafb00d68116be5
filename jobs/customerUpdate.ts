import type { Customer, CustomerInput } from '../src/api/schemas/index.js';
import { buildCustomerInput, cellOf } from '../src/csv/rows.js';
import type { RowContext, RowOutcome, RowProcessor } from './types.js';

/** The update body of a customer as read: everything but CustomerID and CollectionMethod. */
export function asInput(customer: Customer): CustomerInput {
  const { CustomerID: _id, CollectionMethod: _method, ...input } = customer;
  return input;
}

/**
 * Replaces `customer` with the file's columns laid over it. The API's PUT
 * replaces the whole record, so the base is the record as read: a column the
 * file lacks is kept, never blanked by omission (DESIGN section 2). PUT is
 * idempotent: retried plainly, never marked sent.
 */
export async function overlayAndPut(ctx: RowContext, customer: Customer): Promise<RowOutcome> {
  const body = buildCustomerInput(ctx.plan, ctx.cells, asInput(customer));
  const { CustomerID } = await ctx.api.updateCustomer(customer.CustomerID, body);
  return { status: 'updated', customerId: CustomerID };
}

/** `customer.update`: GET the record, overlay the file's columns, PUT it whole. */
export const customerUpdate: RowProcessor = async (ctx) => {
  const customerId = cellOf(ctx.plan, ctx.cells, 'CustomerID') ?? '';
  const { Customer } = await ctx.api.getCustomer(customerId);
  return overlayAndPut(ctx, Customer);
};
