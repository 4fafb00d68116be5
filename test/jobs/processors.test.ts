/**
 * Every processor of jobs/ called directly, with a context of the test's
 * own, against the sandbox over HTTP: no protocol, no queue. What each sends
 * is read back from the sandbox's own store.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ROW_JOBS } from '../../jobs/index.js';
import { BLANK_CUSTOMER_INPUT } from '../../src/csv/rows.js';
import { SEED_CUSTOMERS, SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { openRowsWorld, rowContext, type RowsWorld } from '../support/rows.js';

let world: RowsWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

const endpoints = (w: RowsWorld): string[] => w.requests.map((r) => r.endpoint);
const PERSON = ['Ilse', 'Processor', 'ilse.processor@example.de'];
const PERSON_HEADERS = ['FirstName', 'LastName', 'EmailAddress'];

describe('the processors table', () => {
  it('says which processors mark a pending row sent before any request: the plain creates', () => {
    const first = Object.entries(ROW_JOBS).filter(([, job]) => job.marksSentFirst).map(([name]) => name);
    expect(first.sort()).toEqual(['customer.create', 'signup']);
    // Whatever may create has a way to read it back.
    expect(Object.entries(ROW_JOBS).filter(([, job]) => job.readBack).map(([name]) => name).sort()).toEqual(['customer.create', 'customer.upsert', 'signup']);
  });
});

describe('customer.create', () => {
  it('marks the row sent before its POST, and creates the customer', async () => {
    world = await openRowsWorld();
    const w = world;
    const ctx = rowContext(w, { kind: 'customers', headers: PERSON_HEADERS, cells: PERSON });
    const outcome = await ROW_JOBS['customer.create'].process(ctx);
    const [customer] = w.sandbox.store.customers().filter((c) => c.EmailAddress === 'ilse.processor@example.de');
    expect(outcome).toEqual({ status: 'created', customerId: customer?.CustomerID });
    expect(customer).toMatchObject({ FirstName: 'Ilse', LastName: 'Processor' });
    expect(ctx.marks).toEqual([0]);
    expect(endpoints(w)).toEqual(['createCustomer']);
  });

  it('a row that may have been sent reads back first: found, it is reconciled without a POST; not found, it is created', async () => {
    world = await openRowsWorld();
    const w = world;
    const there = w.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: 'Ilse', LastName: 'Processor', EmailAddress: 'ilse.processor@example.de' });
    const sent = rowContext(w, { kind: 'customers', headers: PERSON_HEADERS, cells: PERSON, previous: 'sent' });
    expect(await ROW_JOBS['customer.create'].process(sent)).toMatchObject({ status: 'reconciled', customerId: there.CustomerID });
    expect(sent.marks).toEqual([]);
    expect(endpoints(w)).not.toContain('createCustomer');

    const other = rowContext(w, { kind: 'customers', headers: PERSON_HEADERS, cells: ['Otto', 'Processor', 'otto.processor@example.de'], previous: 'sent' });
    const before = w.requests.length;
    expect(await ROW_JOBS['customer.create'].process(other)).toMatchObject({ status: 'created' });
    expect(endpoints(w).slice(before)).toEqual(['searchCustomers', 'createCustomer']);
    expect(other.marks).toEqual([before + 1]);
    expect(w.sandbox.store.customers().filter((c) => c.LastName === 'Processor')).toHaveLength(2);
  });
});

describe('customer.update', () => {
  it('overlays the file\'s columns on the record as read and PUTs it whole, keeping what the file lacks; the same values send nothing', async () => {
    world = await openRowsWorld();
    const w = world;
    const margaux = w.sandbox.store.customers().find((c) => c.EmailAddress === SEED_CUSTOMERS[0]?.EmailAddress);
    expect(margaux).toBeDefined();
    const id = margaux?.CustomerID ?? '';
    const ctx = rowContext(w, { kind: 'customers', headers: ['CustomerID', 'EmailAddress'], cells: [id, 'margaux@example.org'] });
    expect(await ROW_JOBS['customer.update'].process(ctx)).toEqual({ status: 'updated', customerId: id });
    expect(w.sandbox.store.getCustomer(id)).toMatchObject({ EmailAddress: 'margaux@example.org', FirstName: 'Margaux', City: 'Lyon', CountryCode: 'FRA' });
    expect(ctx.marks).toEqual([]);

    const before = w.requests.length;
    const same = rowContext(w, { kind: 'customers', headers: ['CustomerID', 'EmailAddress'], cells: [id, 'margaux@example.org'] });
    expect(await ROW_JOBS['customer.update'].process(same)).toMatchObject({ status: 'unchanged', customerId: id });
    expect(endpoints(w).slice(before)).toEqual(['getCustomer']);
  });
});

describe('customer.upsert', () => {
  const HEADERS = ['FirstName', 'LastName', 'EmailAddress', 'City'];

  it('updates the one customer its match field finds', async () => {
    world = await openRowsWorld();
    const w = world;
    const kenji = w.sandbox.store.customers().find((c) => c.EmailAddress === 'kenji.w@example.jp');
    const ctx = rowContext(w, { kind: 'customers', headers: HEADERS, cells: ['Kenji', 'Watanabe', 'kenji.w@example.jp', 'Kyoto'], match: 'EmailAddress' });
    expect(await ROW_JOBS['customer.upsert'].process(ctx)).toEqual({ status: 'updated', customerId: kenji?.CustomerID });
    expect(w.sandbox.store.getCustomer(kenji?.CustomerID ?? '')).toMatchObject({ City: 'Kyoto', CountryCode: 'JPN' });
    expect(ctx.marks).toEqual([]);
  });

  it('creates when nothing matches, having recorded the matches before it, and marked sent before the POST', async () => {
    world = await openRowsWorld();
    const w = world;
    const ctx = rowContext(w, { kind: 'customers', headers: HEADERS, cells: [...PERSON, 'Bonn'], match: 'EmailAddress' });
    const outcome = await ROW_JOBS['customer.upsert'].process(ctx);
    expect(outcome).toMatchObject({ status: 'created' });
    expect(ctx.recorded).toEqual([[]]);
    const create = endpoints(w).indexOf('createCustomer');
    expect(ctx.marks).toEqual([create]);
    expect(w.sandbox.store.getCustomer(outcome.customerId ?? '')).toMatchObject({ EmailAddress: 'ilse.processor@example.de', City: 'Bonn' });
  });

  it('several matches need review, naming them; nothing is sent', async () => {
    world = await openRowsWorld();
    const w = world;
    const a = w.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: 'Ilse', LastName: 'Processor', EmailAddress: 'ilse.processor@example.de' });
    const b = w.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: 'Ilse M.', LastName: 'Processor', EmailAddress: 'ilse.processor@example.de' });
    const ctx = rowContext(w, { kind: 'customers', headers: HEADERS, cells: [...PERSON, 'Bonn'], match: 'EmailAddress' });
    expect(await ROW_JOBS['customer.upsert'].process(ctx)).toMatchObject({ status: 'needs-review', candidates: [a.CustomerID, b.CustomerID] });
    expect(endpoints(w).filter((e) => e !== 'searchCustomers')).toEqual([]);
  });

  it('a row that may have been sent: a match that was not there before its first attempt is its create, reconciled', async () => {
    world = await openRowsWorld();
    const w = world;
    const created = w.sandbox.store.createCustomer({ ...BLANK_CUSTOMER_INPUT, FirstName: 'Ilse', LastName: 'Processor', EmailAddress: 'ilse.processor@example.de', City: 'Bonn' });
    const ctx = rowContext(w, { kind: 'customers', headers: HEADERS, cells: [...PERSON, 'Bonn'], match: 'EmailAddress', previous: 'sent', preexisting: [] });
    expect(await ROW_JOBS['customer.upsert'].process(ctx)).toMatchObject({ status: 'reconciled', customerId: created.CustomerID });
    expect(endpoints(w)).not.toContain('createCustomer');
    expect(endpoints(w)).not.toContain('updateCustomer');
  });
});

describe('signup', () => {
  const HEADERS = ['Customer.FirstName', 'Customer.LastName', 'Customer.EmailAddress', 'Customer.City', 'CreditCardInfo.AccountNumber', 'CreditCardInfo.ExpirationDate', 'CreditCardInfo.CVCode', 'Subscription.OfferCode'];
  const CELLS = ['Amélie', 'Poulain', 'amelie.poulain@example.fr', 'Paris', '4111111111111111', '1230', '737', 'STREAM-PLUS'];

  it('signs up the customer with the offer in one POST, marked sent before it', async () => {
    world = await openRowsWorld();
    const w = world;
    const ctx = rowContext(w, { kind: 'signups', headers: HEADERS, cells: CELLS });
    const outcome = await ROW_JOBS.signup.process(ctx);
    expect(outcome).toMatchObject({ status: 'signed-up' });
    const [subscription] = w.sandbox.store.subscriptions();
    expect(outcome).toEqual({ status: 'signed-up', customerId: subscription?.CustomerID, subscriptionId: subscription?.SubscriptionID });
    expect(subscription).toMatchObject({ OfferCode: 'STREAM-PLUS' });
    expect(w.sandbox.store.getCustomer(outcome.customerId ?? '')).toMatchObject({ EmailAddress: 'amelie.poulain@example.fr', CollectionMethod: 'CreditCard' });
    expect(ctx.marks).toEqual([0]);
    expect(endpoints(w)).toEqual(['signUp']);
    expect(w.logs()).not.toContain('4111111111111111');
  });

  it('a sign-up that may have been sent is reconciled by its customer, its SubscriptionID left empty and said so', async () => {
    world = await openRowsWorld();
    const w = world;
    const first = rowContext(w, { kind: 'signups', headers: HEADERS, cells: CELLS });
    const done = await ROW_JOBS.signup.process(first);
    const again = rowContext(w, { kind: 'signups', headers: HEADERS, cells: CELLS, previous: 'sent' });
    const outcome = await ROW_JOBS.signup.process(again);
    expect(outcome).toMatchObject({ status: 'reconciled', customerId: done.customerId, subscriptionId: '' });
    expect(outcome.note).toMatch(/SubscriptionID cannot be read back/);
    expect(w.sandbox.store.subscriptions()).toHaveLength(1);
  });
});

describe('paymentMethod.update', () => {
  it('PUTs the card to its key, without marking anything sent (a PUT is idempotent)', async () => {
    world = await openRowsWorld();
    const w = world;
    const key = SEED_PAYMENT_METHOD_KEYS[1];
    const headers = ['PaymentMethodKey', 'AccountNumber', 'ExpirationDate', 'CVCode', 'FirstName', 'LastName', 'AddressLine1', 'City', 'PostalCode', 'CountryCode'];
    const ctx = rowContext(w, { kind: 'cards', headers, cells: [key, '4111111111111111', '1230', '737', 'Seán', "O'Brien", '10 Oliver Plunkett St', 'Cork', 'T12 AB12', 'IRL'] });
    expect(await ROW_JOBS['paymentMethod.update'].process(ctx)).toEqual({ status: 'updated', paymentMethodKey: key });
    expect(w.sandbox.store.paymentMethod(key)).toMatchObject({ updates: 1, card: expect.objectContaining({ AccountNumber: '4111111111111111', ExpirationDate: '1230' }) });
    expect(ctx.marks).toEqual([]);
    expect(endpoints(w)).toEqual(['updatePaymentMethod']);
  });
});
