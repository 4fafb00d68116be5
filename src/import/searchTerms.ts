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
import { cellReader, type RowReader } from '../csv/rows.js';
import { normalizeEmail, normalizeText } from '../customers/identity.js';
import { keptRecently } from '../memo.js';
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
  return searchableValues(plan, cellReader(plan, cells));
}

/** Each kind's paths of the searchable person fields (none for card files), built once rather than per row. */
const PERSON_PATHS: Record<ColumnPlan['kind'], { email: string; firstName: string; lastName: string } | undefined> = {
  customers: { email: 'EmailAddress', firstName: 'FirstName', lastName: 'LastName' },
  signups: { email: signupCustomerPath('EmailAddress'), firstName: signupCustomerPath('FirstName'), lastName: signupCustomerPath('LastName') },
  cards: undefined,
};

/** The searchable values of a row read through `row` (the producer's are cleaned once for every reader of the row). */
export function searchableValues(plan: ColumnPlan, row: RowReader): SearchableValues {
  const person = PERSON_PATHS[plan.kind];
  return {
    email: (person && row.get(person.email)) ?? '',
    firstName: (person && row.get(person.firstName)) ?? '',
    lastName: (person && row.get(person.lastName)) ?? '',
    customerId: row.get(CUSTOMER_ID) ?? '',
    paymentMethodKey: row.get(PAYMENT_METHOD_KEY) ?? '',
  };
}

/** Which value a term matched, as `find` reports it. */
export type MatchedField = 'email' | 'name' | 'customerId' | 'paymentMethodKey';

/** The normalised terms of a row's values, each with the field it comes from; the full name is compared, not indexed. */
export function termsOf(values: SearchableValues): Array<{ term: string; field: MatchedField; indexed: boolean }> {
  const terms: Array<{ term: string; field: MatchedField; indexed: boolean }> = [];
  eachTerm(values, (term, field, indexed) => terms.push({ term, field, indexed }));
  return terms;
}

/**
 * Visits a row's distinct terms in order: the email, the first and the last
 * name, the full name (compared, not indexed), the CustomerID, the
 * PaymentMethodKey.
 */
function eachTerm(values: SearchableValues, visit: (term: string, field: MatchedField, indexed: boolean) => void): void {
  const seen: string[] = [];
  const add = (term: string, field: MatchedField, indexed = true): void => {
    if (term === '' || seen.includes(term)) return;
    seen.push(term);
    visit(term, field, indexed);
  };
  add(normalizeEmail(values.email), 'email');
  const first = normalizeText(values.firstName);
  const last = normalizeText(values.lastName);
  add(first, 'name');
  add(last, 'name');
  if (first !== '' && last !== '') add(`${first} ${last}`, 'name', false);
  add(idTerm(values.customerId), 'customerId');
  add(idTerm(values.paymentMethodKey), 'paymentMethodKey');
}

/**
 * The digests of a row's terms (what the producer indexes): those of
 * {@link eachTerm}, in its order, written out for the producer, which takes
 * them for every row (without a closure and a list of seen terms per row).
 */
export function rowTermDigests(values: SearchableValues): string[] {
  const digests: string[] = [];
  const email = normalizeEmail(values.email);
  const first = normalizeText(values.firstName);
  const last = normalizeText(values.lastName);
  if (email !== '') digests.push(termDigest(email));
  if (first !== '' && first !== email) digests.push(nameDigest(first));
  if (last !== '' && last !== email && last !== first) digests.push(nameDigest(last));
  const customerId = idTerm(values.customerId);
  const paymentMethodKey = idTerm(values.paymentMethodKey);
  if (customerId === '' && paymentMethodKey === '') return digests;
  // The full name is no term of its own, but an id equal to it counts as seen (as eachTerm has it).
  const full = first !== '' && last !== '' ? `${first} ${last}` : '';
  const before = (term: string): boolean => term === email || term === first || term === last || term === full;
  if (customerId !== '' && !before(customerId)) digests.push(termDigest(customerId));
  if (paymentMethodKey !== '' && !before(paymentMethodKey) && paymentMethodKey !== customerId) digests.push(termDigest(paymentMethodKey));
  return digests;
}

/** Digests of names seen lately: a file repeats its first and last names far more than its emails or ids. */
const nameDigest = keptRecently(4096, (name) => termDigest(name));

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
