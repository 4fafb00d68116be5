import { CUSTOMER_ID, PAYMENT_METHOD_KEY, signupCustomerPath, type ColumnPlan } from '../csv/columns.js';
import type { RowOptions, RowReader } from '../csv/rows.js';
import { fieldKey, identityKey, type Person } from '../customers/identity.js';
import type { JobName } from '../outcomes.js';

/** One thing a row is about, and how a message names it. */
export interface RowKey {
  key: string;
  /** What two rows with this key share, for the `duplicate` note: `the same person (…)`, `the same CustomerID`. */
  what: string;
}

const PERSON = 'the same person (first name, last name and email)';

/** The paths of a person's fields: a sign-up's under `Customer.`, a customers file's as they are. Built once, not per row. */
const PERSON_PATHS = {
  signups: { FirstName: signupCustomerPath('FirstName'), LastName: signupCustomerPath('LastName'), EmailAddress: signupCustomerPath('EmailAddress') },
  other: { FirstName: 'FirstName', LastName: 'LastName', EmailAddress: 'EmailAddress' },
};

/** The person a customers or sign-ups row creates, from its own columns (read through `row`: src/csv/rows.ts). */
export function personOf(plan: ColumnPlan, row: RowReader): Person {
  const paths = plan.kind === 'signups' ? PERSON_PATHS.signups : PERSON_PATHS.other;
  return { FirstName: row.get(paths.FirstName) ?? '', LastName: row.get(paths.LastName) ?? '', EmailAddress: row.get(paths.EmailAddress) ?? '' };
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
export function rowKeys(plan: ColumnPlan, row: RowReader, name: JobName, options: Pick<RowOptions, 'match'>): RowKey[] {
  switch (name) {
    case 'customer.create':
    case 'signup':
      return [{ key: identityKey(personOf(plan, row)), what: PERSON }];
    case 'customer.upsert': {
      const field = options.match ?? 'EmailAddress';
      const keys = [{ key: fieldKey(field, row.get(field) ?? ''), what: `the same ${field}` }];
      return field === 'EmailAddress' ? keys : [...keys, { key: identityKey(personOf(plan, row)), what: PERSON }];
    }
    case 'customer.update':
      return [{ key: fieldKey(CUSTOMER_ID, row.get(CUSTOMER_ID) ?? ''), what: `the same ${CUSTOMER_ID}` }];
    case 'paymentMethod.update':
      return [{ key: fieldKey(PAYMENT_METHOD_KEY, (row.get(PAYMENT_METHOD_KEY) ?? '').replace(/^\{(.*)\}$/, '$1')), what: `the same ${PAYMENT_METHOD_KEY}` }];
  }
}
