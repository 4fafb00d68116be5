import { CUSTOMER_ID, PAYMENT_METHOD_KEY, signupCustomerPath, type ColumnPlan } from '../csv/columns.js';
import { cellOf, type RowOptions } from '../csv/rows.js';
import { fieldKey, identityKey, type Person } from '../customers/identity.js';
import type { JobName } from '../outcomes.js';

/** One thing a row is about, and how a message names it. */
export interface RowKey {
  key: string;
  /** What two rows with this key share, for the `duplicate` note: `the same person (…)`, `the same CustomerID`. */
  what: string;
}

const PERSON = 'the same person (first name, last name and email)';

/** The person a customers or sign-ups row creates, from its own columns. */
export function personOf(plan: ColumnPlan, cells: readonly string[]): Person {
  const path = plan.kind === 'signups' ? signupCustomerPath : (field: string): string => field;
  const cell = (field: string): string => cellOf(plan, cells, path(field)) ?? '';
  return { FirstName: cell('FirstName'), LastName: cell('LastName'), EmailAddress: cell('EmailAddress') };
}

/**
 * What a valid row is about, as keys: two rows of one file sharing any key
 * act on the same person or record, so the later one is a duplicate.
 * - a create or sign-up: the person it creates;
 * - an upsert: its match field's value (the customer it updates), and the
 *   person it would create when nothing matches;
 * - an update: its CustomerID; a card update: its PaymentMethodKey. Rows run
 *   side by side, so two writes to one record in one file would land in no
 *   set order.
 */
export function rowKeys(plan: ColumnPlan, cells: readonly string[], name: JobName, options: Pick<RowOptions, 'match'>): RowKey[] {
  switch (name) {
    case 'customer.create':
    case 'signup':
      return [{ key: identityKey(personOf(plan, cells)), what: PERSON }];
    case 'customer.upsert': {
      const field = options.match ?? 'EmailAddress';
      const keys = [{ key: fieldKey(field, cellOf(plan, cells, field) ?? ''), what: `the same ${field}` }];
      return field === 'EmailAddress' ? keys : [...keys, { key: identityKey(personOf(plan, cells)), what: PERSON }];
    }
    case 'customer.update':
      return [{ key: fieldKey(CUSTOMER_ID, cellOf(plan, cells, CUSTOMER_ID) ?? ''), what: `the same ${CUSTOMER_ID}` }];
    case 'paymentMethod.update':
      return [{ key: fieldKey(PAYMENT_METHOD_KEY, (cellOf(plan, cells, PAYMENT_METHOD_KEY) ?? '').replace(/^\{(.*)\}$/, '$1')), what: `the same ${PAYMENT_METHOD_KEY}` }];
  }
}
