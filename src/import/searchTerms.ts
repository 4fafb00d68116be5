/**
 * What of a row can be searched, and the terms a search text stands for.
 * Pure: the producer indexes rows with it, `find` checks each hit with it.
 *
 * Searchable: the email, the first name, the last name, the full name
 * (first and last), the CustomerID and the PaymentMethodKey. The full name
 * is not indexed (a term per row more would grow the index by a quarter): a
 * search of several words also looks its words up as a first and a last name
 * and keeps the rows holding both. Read by column
 * path, so card numbers, CVCs, expiry dates and passwords are never read,
 * never indexed and never compared.
 *
 * A term is normalised as the duplicate guard compares people (NFC,
 * invisible characters dropped, spaces collapsed, lower-case; an email loses
 * every space), an identifier without its braces. Matching is whole-term: an
 * email, a name or an id as written, not a part of one.
 */
import { CUSTOMER_ID, PAYMENT_METHOD_KEY, signupCustomerPath, type ColumnPlan } from '../csv/columns.js';
import { cellOf } from '../csv/rows.js';
import { normalizeEmail, normalizeText } from '../customers/identity.js';
import { idTerm, termDigest } from '../store/searchIndex.js';

/** A row's searchable values as the file (or the service, for ids) gives them; '' when absent. */
export interface SearchableValues {
  email: string;
  firstName: string;
  lastName: string;
  customerId: string;
  paymentMethodKey: string;
}

/** The searchable cells of a row of any kind. */
export function searchableCells(plan: ColumnPlan, cells: readonly string[]): SearchableValues {
  const person = (field: string): string => (plan.kind === 'signups' ? cellOf(plan, cells, signupCustomerPath(field)) : plan.kind === 'customers' ? cellOf(plan, cells, field) : undefined) ?? '';
  return {
    email: person('EmailAddress'),
    firstName: person('FirstName'),
    lastName: person('LastName'),
    customerId: cellOf(plan, cells, CUSTOMER_ID) ?? '',
    paymentMethodKey: cellOf(plan, cells, PAYMENT_METHOD_KEY) ?? '',
  };
}

/** Which value a term matched, as `find` reports it. */
export type MatchedField = 'email' | 'name' | 'customerId' | 'paymentMethodKey';

/** The normalised terms of a row's values, each with the field it comes from; the full name is compared, not indexed. */
export function termsOf(values: SearchableValues): Array<{ term: string; field: MatchedField; indexed: boolean }> {
  const terms: Array<{ term: string; field: MatchedField; indexed: boolean }> = [];
  const add = (term: string, field: MatchedField, indexed = true): void => {
    if (term !== '' && !terms.some((t) => t.term === term)) terms.push({ term, field, indexed });
  };
  add(normalizeEmail(values.email), 'email');
  const first = normalizeText(values.firstName);
  const last = normalizeText(values.lastName);
  add(first, 'name');
  add(last, 'name');
  if (first !== '' && last !== '') add(`${first} ${last}`, 'name', false);
  add(idTerm(values.customerId), 'customerId');
  add(idTerm(values.paymentMethodKey), 'paymentMethodKey');
  return terms;
}

/** The digests of a row's terms (what the producer indexes). */
export const rowTermDigests = (values: SearchableValues): string[] => termsOf(values).filter((t) => t.indexed).map(({ term }) => termDigest(term));

/**
 * The terms a search text may stand for: the text as a name or id, and as an
 * email (without spaces); empty for a text with nothing to search.
 */
export function queryTerms(text: string): string[] {
  const terms = new Set([normalizeText(text), normalizeEmail(text), idTerm(normalizeText(text))]);
  terms.delete('');
  return [...terms];
}

/** The ways a text of several words splits into a first and a last name: `a b c` is `a` + `b c`, and `a b` + `c`. */
export function nameSplits(text: string): Array<[first: string, last: string]> {
  const words = normalizeText(text).split(' ').filter((w) => w !== '');
  return words.slice(1).map((_, i) => [words.slice(0, i + 1).join(' '), words.slice(i + 1).join(' ')]);
}
