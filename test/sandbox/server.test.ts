import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CustomerSchema } from '../../src/api/schemas/index.js';
import { PER_SECOND_SPAN, SlidingSecond, SlidingWindowLimiter, countRequest, emptyStats } from '../../src/sandbox/faults.js';
import { personAt } from '../../src/sandbox/population.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/server.js';
import { cardInfo, customerInput, signupRequest } from '../support/bodies.js';
import { messageOf, rawRequest } from '../support/http.js';

describe('SlidingWindowLimiter', () => {
  it('admits at most the limit in any second, and says how long to wait', () => {
    const limiter = new SlidingWindowLimiter();
    expect([0, 1, 2].map((t) => limiter.tryAdmit(3, 1000 + t))).toEqual([0, 0, 0]);
    expect(limiter.tryAdmit(3, 1500)).toBe(1);
    expect(limiter.tryAdmit(3, 2000)).toBe(0); // the first left the window at 2000
    expect(limiter.tryAdmit(3, 2000)).toBe(1);
  });
});

describe("the sandbox's request counts", () => {
  it('count each whole second from the first request, a quiet second as 0, for a day at most, none before it', () => {
    const stats = emptyStats();
    for (const at of [5_000, 5_999, 6_000, 8_500, 8_999]) countRequest(stats, at);
    expect(stats).toMatchObject({ requests: 5, firstRequestAt: 5_000, lastRequestAt: 8_999, perSecond: [2, 1, 0, 2] });
    countRequest(stats, 5_000 + PER_SECOND_SPAN * 1000);
    countRequest(stats, 4_000);
    expect(stats).toMatchObject({ requests: 7, lastRequestAt: 4_000 });
    expect(stats.perSecond).toEqual([2, 1, 0, 2]);
  });

  it('find the fullest sliding second, which whole seconds can hide', () => {
    const stats = emptyStats();
    const lastSecond = new SlidingSecond();
    // Whole seconds from the first: 4, then 3. From 100 (left out) to 1100: five.
    for (const at of [10_000, 10_100, 10_200, 10_999, 11_000, 11_099, 11_100]) countRequest(stats, at, lastSecond);
    expect(stats.perSecond).toEqual([4, 3]);
    expect(stats.fullestSecond).toBe(5);
    countRequest(stats, 13_000, lastSecond);
    expect(stats.fullestSecond).toBe(5);
  });
});

describe('sandbox service', () => {
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ port: 0 });
  });
  afterAll(() => sandbox.close());

  it('reports its fullest sliding second of requests', async () => {
    sandbox.resetStats();
    for (let i = 0; i < 3; i++) await rawRequest(`${sandbox.url}/json/offers/NO-SUCH-OFFER`);
    const stats = z.object({ requests: z.number(), fullestSecond: z.number() }).parse((await rawRequest(`${sandbox.url}/_sandbox/stats`)).json);
    expect(stats.requests).toBe(3);
    // Three requests in a row: in one second on any machine that runs this, but never more than were sent.
    expect(stats.fullestSecond).toBeGreaterThanOrEqual(1);
    expect(stats.fullestSecond).toBeLessThanOrEqual(3);
    sandbox.resetStats();
  });

  it('starts counting again on DELETE /_sandbox/stats, its customers kept', async () => {
    const StatsSchema = z.object({ requests: z.number(), fullestSecond: z.number(), perSecond: z.array(z.number()), firstRequestAt: z.number().optional(), customers: z.number() });
    for (let i = 0; i < 2; i++) await rawRequest(`${sandbox.url}/json/offers/NO-SUCH-OFFER`);
    const before = StatsSchema.parse((await rawRequest(`${sandbox.url}/_sandbox/stats`)).json);
    expect(before.requests).toBeGreaterThanOrEqual(2);
    const reset = await rawRequest(`${sandbox.url}/_sandbox/stats`, { method: 'DELETE' });
    expect(reset.status).toBe(200);
    expect(StatsSchema.parse(reset.json)).toMatchObject({ requests: 0, fullestSecond: 0, perSecond: [], customers: before.customers });
    expect(StatsSchema.parse(reset.json).firstRequestAt).toBeUndefined();
    await rawRequest(`${sandbox.url}/json/offers/NO-SUCH-OFFER`);
    const after = StatsSchema.parse((await rawRequest(`${sandbox.url}/_sandbox/stats`)).json);
    expect(after).toMatchObject({ requests: 1, fullestSecond: 1, perSecond: [1] });
    sandbox.resetStats();
  });

  it('seeds customers owning the fixed payment-method keys', () => {
    for (const key of SEED_PAYMENT_METHOD_KEYS) expect(sandbox.store.paymentMethod(key)?.CustomerID).toMatch(/^\d+$/);
    expect(sandbox.store.customers()).toHaveLength(SEED_PAYMENT_METHOD_KEYS.length);
  });

  it('switches faults over HTTP, refuses bad ones, and counts what it injected', async () => {
    const set = await rawRequest(`${sandbox.url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify({ errorRate: 1 }) });
    expect(set.status).toBe(200);
    expect(set.json).toMatchObject({ errorRate: 1, latencyMs: 0 });
    const failed = await rawRequest(`${sandbox.url}/json/offers/STREAM-PLUS`);
    expect(failed.status).toBe(503);
    expect(messageOf(failed.json)).toMatch(/temporarily unavailable/);

    for (const bad of [{ errorRate: 2 }, { latencyMs: -1 }, { surprise: 1 }]) {
      const refused = await rawRequest(`${sandbox.url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify(bad) });
      expect(refused.status, JSON.stringify(bad)).toBe(400);
    }
    expect(() => sandbox.setFaults({ dropAfterCommitRate: 1.5 })).toThrow(RangeError);

    await rawRequest(`${sandbox.url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify({ errorRate: 0 }) });
    const stats = await rawRequest(`${sandbox.url}/_sandbox/stats`);
    expect(stats.json).toMatchObject({ faults: { error5xx: 1 }, byStatus: { 503: 1 }, byEndpoint: { getOffer: 1 }, customers: SEED_PAYMENT_METHOD_KEYS.length });
  });

  it('echoes card data in its refusals of card requests when told to, unapplied, and in nothing else', async () => {
    sandbox.resetStats();
    const customers = sandbox.store.customerCount();
    const set = await rawRequest(`${sandbox.url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify({ echoCardData: 1 }) });
    expect(set.json).toMatchObject({ echoCardData: 1, echoCardDataStatus: 400 });
    const declined = await rawRequest(`${sandbox.url}/json/signups`, { method: 'POST', body: JSON.stringify(signupRequest({ card: { AccountNumber: '4111111111111111', CVCode: '737' } })) });
    expect(declined.status).toBe(400);
    expect(messageOf(declined.json)).toBe('Card 4111111111111111 (4111.1111.1111.1111) cvc 737 was declined');
    expect(sandbox.store.customerCount()).toBe(customers);

    sandbox.setFaults({ echoCardDataStatus: 500 });
    const key = SEED_PAYMENT_METHOD_KEYS[0] ?? '';
    const failed = await rawRequest(`${sandbox.url}/json/paymentmethods/${key}`, {
      method: 'PUT',
      body: JSON.stringify({ CreditCard: { ...cardInfo({ AccountNumber: '5555555555554444', CVCode: '' }), PaymentMethodKey: key } }),
    });
    expect(failed.status).toBe(500);
    expect(messageOf(failed.json)).toMatch(/card 5555555555554444 \(5555\.5555\.5555\.4444\) cvc none/);
    expect(sandbox.store.paymentMethod(key)?.updates).toBe(0);
    // Requests without card data are answered as ever.
    const created = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: JSON.stringify(customerInput({ LastName: 'Unechoed' })) });
    expect(created.status).toBe(200);
    sandbox.setFaults({ echoCardData: 0, echoCardDataStatus: 400 });
    expect(sandbox.stats().faults.echoedCardData).toBe(2);
  });

  it('lists every customer for checks, and counts applied changes', async () => {
    sandbox.resetStats();
    const created = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: JSON.stringify(customerInput({ LastName: 'Listed' })) });
    expect(created.status).toBe(200);
    const list = await rawRequest(`${sandbox.url}/_sandbox/customers`);
    const { Customers: customers } = z.object({ Customers: z.array(CustomerSchema) }).parse(list.json);
    expect(customers.map((c) => c.LastName)).toContain('Listed');
    expect(sandbox.stats()).toMatchObject({ requests: 1, applied: 1, byStatus: { 200: 1 } });
  });

  it('refuses an empty or oversized body', async () => {
    const empty = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: '' });
    expect(empty.status).toBe(400);
    const huge = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: JSON.stringify({ FirstName: 'x'.repeat(1_100_000) }) });
    expect(huge.status).toBe(413);
  });
});

const DuplicatesSchema = z.object({
  count: z.number(),
  identities: z.array(z.object({ FirstName: z.string(), LastName: z.string(), EmailAddress: z.string(), CustomerIDs: z.array(z.string()) })),
});
const SearchAnswerSchema = z.object({ TotalItemCount: z.number(), Customers: z.array(CustomerSchema) });

describe('sandbox seeded with a population', () => {
  const SEEDED = 200_000;
  let sandbox: Sandbox;
  beforeAll(async () => {
    sandbox = await startSandbox({ port: 0, seedCustomers: SEEDED, seedRandom: 4 });
  });
  afterAll(() => sandbox.close());

  it('reports the number of customers in its stats', async () => {
    const stats = await rawRequest(`${sandbox.url}/_sandbox/stats`);
    expect(stats.json).toMatchObject({ customers: SEED_PAYMENT_METHOD_KEYS.length + SEEDED, requests: 0 });
  });

  it('holds no duplicate identity, and reports one as soon as someone is created twice', async () => {
    const none = DuplicatesSchema.parse((await rawRequest(`${sandbox.url}/_sandbox/duplicates`)).json);
    expect(none).toEqual({ count: 0, identities: [] });

    const original = personAt(4, 1234);
    // The same identity apart from case and surrounding blanks.
    const again = customerInput({
      ...original,
      FirstName: ` ${original.FirstName.toUpperCase()} `,
      LastName: original.LastName.toLowerCase(),
      EmailAddress: original.EmailAddress.toUpperCase(),
    });
    const created = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: JSON.stringify(again) });
    expect(created.status).toBe(200);
    const { CustomerID } = z.object({ CustomerID: z.string() }).parse(created.json);

    const found = DuplicatesSchema.parse((await rawRequest(`${sandbox.url}/_sandbox/duplicates`)).json);
    expect(found).toEqual({
      count: 1,
      identities: [{
        FirstName: original.FirstName.toLowerCase(),
        LastName: original.LastName.toLowerCase(),
        EmailAddress: original.EmailAddress.toLowerCase(),
        CustomerIDs: [String(100_001 + SEED_PAYMENT_METHOD_KEYS.length + 1234), CustomerID],
      }],
    });
  });

  it('searches over HTTP as a filter over every customer would, new customers included', async () => {
    await rawRequest(`${sandbox.url}/json/customers`, {
      method: 'POST',
      body: JSON.stringify(customerInput({ FirstName: 'Ashlee', LastName: 'Smith', EmailAddress: 'ashlee.smith.http@example.com' })),
    });
    const customers = sandbox.store.customers();
    for (const [contains, skip] of [['smith', 0], ['Smith', 1_500], ['LEE', 3_000], ['ashlee', 10], ['', 150_000], ['zq', 0]] as const) {
      const answer = SearchAnswerSchema.parse((await rawRequest(`${sandbox.url}/json/customers?contains=${encodeURIComponent(contains)}&skip=${skip}&take=100`)).json);
      const needle = contains.toLowerCase();
      const matches = customers.filter((c) => c.FirstName.toLowerCase().includes(needle) || c.LastName.toLowerCase().includes(needle));
      expect(answer.TotalItemCount, contains).toBe(matches.length);
      expect(answer.Customers.map((c) => c.CustomerID), contains).toEqual(matches.slice(skip, skip + 100).map((c) => c.CustomerID));
    }
    const smiths = SearchAnswerSchema.parse((await rawRequest(`${sandbox.url}/json/customers?contains=smith&skip=0&take=1`)).json);
    expect(smiths.TotalItemCount).toBeGreaterThan(1_000);
  });
});
