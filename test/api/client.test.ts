import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createApiClient, createdAnswer, type ApiCall, type ApiClient } from '../../src/api/client.js';
import {
  ApiBadResponseError,
  ApiError,
  ApiNetworkError,
  ApiNotFoundError,
  ApiRateLimitedError,
  ApiRefusedError,
  ApiServerError,
  ApiTimeoutError,
  ApiUnauthorizedError,
} from '../../src/api/errors.js';
import { CreateCustomerResponseSchema, CustomerSchema, OfferSchema } from '../../src/api/schemas/index.js';
import { NO_FAULTS } from '../../src/sandbox/faults.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/server.js';
import { FIBER_ITEMS, OTHER_TEST_CARD, cardInfo, customerInput, signupRequest } from '../support/bodies.js';
import { messageOf, rawRequest } from '../support/http.js';

/** Awaits a promise that must reject, and returns its ApiError. */
async function apiFailure(promise: Promise<unknown>): Promise<ApiError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApiError);
  return error as ApiError;
}

let sandbox: Sandbox;
let client: ApiClient;
const calls: ApiCall[] = [];

beforeAll(async () => {
  sandbox = await startSandbox({ port: 0 });
  client = createApiClient({ baseUrl: sandbox.url, onCall: (call) => calls.push(call) });
});
afterAll(async () => {
  await client.close();
  await sandbox.close();
});
afterEach(() => sandbox.setFaults(NO_FAULTS));

describe('every endpoint through the client', () => {
  it('creates, reads and replaces a customer', async () => {
    const created = await client.createCustomer(customerInput({ FirstName: 'Zoë', LastName: "D'Arcy-Lefèvre", MobileNumber: '+33 6 12 34 56 78' }));
    expect(created.Message).toBe('OK');
    expect(created.CustomerID).toMatch(/^\d+$/);

    const read = await client.getCustomer(created.CustomerID);
    expect(read.Customer).toMatchObject({
      CustomerID: created.CustomerID,
      FirstName: 'Zoë',
      LastName: "D'Arcy-Lefèvre",
      MobileNumber: '+33 6 12 34 56 78',
      CollectionMethod: 'Invoice',
      Password: '',
    });

    // PUT replaces the whole record: the blanked City is blanked.
    const updated = await client.updateCustomer(created.CustomerID, customerInput({ FirstName: 'Zoë', LastName: 'Lefèvre', City: '' }));
    expect(updated.CustomerID).toBe(created.CustomerID);
    const after = await client.getCustomer(created.CustomerID);
    expect(after.Customer.LastName).toBe('Lefèvre');
    expect(after.Customer.City).toBe('');
    expect(after.Customer.MobileNumber).toBeNull();
  });

  it('reads an offer with its price plan', async () => {
    const { Offer } = await client.getOffer('STREAM-PLUS');
    expect(OfferSchema.parse(Offer)).toEqual(Offer);
    expect(Offer.Status).toBe('Active');
    expect(Offer.PricePlan.PricePlanItems.length).toBeGreaterThan(1);
    expect(Offer.PricePlan.FreeTrialDuration).toBeGreaterThan(0);
    const inactive = await client.getOffer('LEGACY-2019');
    expect(inactive.Offer.Status).not.toBe('Active');
  });

  it('signs up a customer with provisioning, creating customer, subscription and payment method', async () => {
    const response = await client.signUp(
      signupRequest({ customer: { FirstName: 'Ingrid', LastName: 'Fibersson' }, subscription: { OfferCode: 'FIBER-500', SubscriptionItems: FIBER_ITEMS } }),
    );
    expect(response.CustomerID).toMatch(/^\d+$/);
    expect(response.SubscriptionID).not.toBe('');
    const { Customer } = await client.getCustomer(response.CustomerID);
    expect(Customer).toMatchObject({ FirstName: 'Ingrid', LastName: 'Fibersson', Password: '' });
    const subscription = sandbox.store.subscriptions().find((s) => s.SubscriptionID === response.SubscriptionID);
    expect(subscription).toMatchObject({ CustomerID: response.CustomerID, OfferCode: 'FIBER-500', SubscriptionItems: FIBER_ITEMS });
  });

  it('updates a seeded payment method', async () => {
    const key = SEED_PAYMENT_METHOD_KEYS[0];
    const response = await client.updatePaymentMethod(key, { CreditCard: { ...cardInfo({ AccountNumber: OTHER_TEST_CARD, ExpirationDate: '0931' }), PaymentMethodKey: key } });
    expect(response.PaymentMethodKey).toBe(key);
    expect(sandbox.store.paymentMethod(key)?.card).toMatchObject({ AccountNumber: OTHER_TEST_CARD, ExpirationDate: '0931' });
  });

  it('sends the configured Authorization header, and a missing one is refused as unauthorised', async () => {
    const guarded = await startSandbox({ port: 0, auth: 'Bearer test-token' });
    const good = createApiClient({ baseUrl: guarded.url, auth: 'Bearer test-token' });
    const bad = createApiClient({ baseUrl: guarded.url });
    try {
      await expect(good.getOffer('STREAM-PLUS')).resolves.toMatchObject({ Offer: { OfferCode: 'STREAM-PLUS' } });
      const error = await apiFailure(bad.getOffer('STREAM-PLUS'));
      expect(error).toBeInstanceOf(ApiUnauthorizedError);
      expect(error).toMatchObject({ status: 401, transient: false, maybeApplied: false });
    } finally {
      await Promise.all([good.close(), bad.close()]);
      await guarded.close();
    }
  });

  it('keeps a path prefix of the base URL', async () => {
    const prefixed = createApiClient({ baseUrl: `${sandbox.url}/` });
    try {
      await expect(prefixed.getOffer('NEWS-ANNUAL')).resolves.toMatchObject({ Offer: { OfferCode: 'NEWS-ANNUAL' } });
    } finally {
      await prefixed.close();
    }
  });

  it('reports every call to onCall, and awaits beforeRequest before each', async () => {
    const seen: string[] = [];
    const hooked = createApiClient({
      baseUrl: sandbox.url,
      beforeRequest: async (endpoint) => {
        seen.push(`before ${endpoint}`);
      },
      onCall: (call) => seen.push(`after ${call.endpoint} ${call.status ?? '-'}`),
    });
    try {
      await hooked.getOffer('STREAM-PLUS');
      await hooked.getCustomer('999999999').catch(() => undefined);
      expect(seen).toEqual(['before getOffer', 'after getOffer 200', 'before getCustomer', 'after getCustomer 404']);
    } finally {
      await hooked.close();
    }
    expect(calls.some((c) => c.endpoint === 'createCustomer' && c.status === 200 && c.durationMs >= 0)).toBe(true);
  });
});

describe("a create's answer", () => {
  it('is taken by the hand check only as the schema takes it, and left to the schema otherwise', () => {
    const answers: unknown[] = [
      { Message: 'Success', CustomerID: '100001' },
      { Message: '', CustomerID: '0', Extra: 1 },
      { CustomerID: '100001', Message: 'x' },
      { Message: 'Success', CustomerID: 100001 },
      { Message: 'Success', CustomerID: '10a' },
      { Message: 'Success', CustomerID: '' },
      { Message: 'Success', CustomerID: '1\n' },
      { Message: null, CustomerID: '1' },
      { CustomerID: '1' },
      ['Success', '1'],
      null,
      'Success',
      undefined,
    ];
    for (const json of answers) {
      const parsed = CreateCustomerResponseSchema.safeParse(json);
      const fast = createdAnswer(json);
      if (fast === undefined) expect(parsed.success).toBe(false);
      else {
        expect(parsed.success).toBe(true);
        expect(fast).toStrictEqual(parsed.data);
        expect(Object.keys(fast)).toEqual(Object.keys(parsed.data ?? {}));
      }
    }
  });
});

describe('search paging', () => {
  const lastName = 'Pageworth';
  beforeAll(async () => {
    for (let i = 0; i < 250; i++) {
      await client.createCustomer(customerInput({ FirstName: `Quill${String(i).padStart(3, '0')}`, LastName: lastName }));
    }
  });

  it('pages 250 matches as 100, 100, 50 with a constant TotalItemCount', async () => {
    const pages = await Promise.all([0, 100, 200].map((skip) => client.searchCustomers({ contains: lastName, skip, take: 100 })));
    expect(pages.map((p) => p.Customers.length)).toEqual([100, 100, 50]);
    expect(pages.map((p) => p.TotalItemCount)).toEqual([250, 250, 250]);
    const ids = pages.flatMap((p) => p.Customers.map((c) => c.CustomerID));
    expect(new Set(ids).size).toBe(250);
    for (const customer of pages[0]?.Customers ?? []) expect(CustomerSchema.parse(customer)).toEqual(customer);
  });

  it('TotalItemCount does not depend on skip or take', async () => {
    const small = await client.searchCustomers({ contains: lastName, skip: 7, take: 3 });
    expect(small.Customers).toHaveLength(3);
    expect(small.TotalItemCount).toBe(250);
    expect(small.Customers[0]?.FirstName).toBe('Quill007');
  });

  it('skipping beyond the end returns no customers and the full count', async () => {
    const past = await client.searchCustomers({ contains: lastName, skip: 1000, take: 100 });
    expect(past.Customers).toEqual([]);
    expect(past.TotalItemCount).toBe(250);
  });

  it('matches first names and last names, whatever the case', async () => {
    const byFirst = await client.searchCustomers({ contains: 'quill12', skip: 0, take: 100 });
    expect(byFirst.TotalItemCount).toBe(10); // Quill120..Quill129
    const byLastUpper = await client.searchCustomers({ contains: 'PAGEWORTH', skip: 0, take: 1 });
    expect(byLastUpper.TotalItemCount).toBe(250);
    const inside = await client.searchCustomers({ contains: 'gewor', skip: 0, take: 1 });
    expect(inside.TotalItemCount).toBe(250);
    const none = await client.searchCustomers({ contains: 'no-such-name-anywhere', skip: 0, take: 100 });
    expect(none).toMatchObject({ Customers: [], TotalItemCount: 0 });
  });

  it('an empty contains matches every customer', async () => {
    const all = await client.searchCustomers({ contains: '', skip: 0, take: 1 });
    expect(all.TotalItemCount).toBe(sandbox.store.customers().length);
  });

  it('refuses take 101 and take 0', async () => {
    for (const take of [101, 0]) {
      const error = await apiFailure(client.searchCustomers({ contains: lastName, skip: 0, take }));
      expect(error).toBeInstanceOf(ApiRefusedError);
      expect(error).toMatchObject({ status: 400, transient: false, maybeApplied: false, endpoint: 'searchCustomers' });
      expect(error.apiMessage).toMatch(/take/);
    }
  });

  it('refuses each missing or malformed query parameter', async () => {
    const cases = ['skip=0&take=10', 'contains=a&take=10', 'contains=a&skip=0', '', 'contains=a&skip=-1&take=10', 'contains=a&skip=x&take=10'];
    for (const query of cases) {
      const { status, json } = await rawRequest(`${sandbox.url}/json/customers?${query}`);
      expect(status, query).toBe(400);
      expect(messageOf(json), query).not.toBe('OK');
    }
    const missing = await rawRequest(`${sandbox.url}/json/customers?contains=a`);
    expect(messageOf(missing.json)).toMatch(/skip, take/);
  });
});

describe('refusals', () => {
  it('a customer, offer or payment method that does not exist is 404, permanent', async () => {
    for (const attempt of [
      client.getCustomer('987654321'),
      client.updateCustomer('987654321', customerInput()),
      client.getOffer('NO-SUCH-OFFER'),
      client.updatePaymentMethod('00000000-0000-4000-8000-000000000000', {
        CreditCard: { ...cardInfo(), PaymentMethodKey: '00000000-0000-4000-8000-000000000000' },
      }),
    ]) {
      const error = await apiFailure(attempt);
      expect(error).toBeInstanceOf(ApiNotFoundError);
      expect(error).toMatchObject({ status: 404, transient: false, maybeApplied: false });
      expect(error.apiMessage).toMatch(/not found/);
    }
  });

  it.each([
    ['a blank last name', () => client.createCustomer(customerInput({ LastName: '' })), /LastName is required/],
    ['a malformed email', () => client.createCustomer(customerInput({ EmailAddress: 'not-an-email' })), /EmailAddress/],
    ['a two-letter country', () => client.createCustomer(customerInput({ CountryCode: 'FR' })), /CountryCode/],
    ['an inactive offer', () => client.signUp(signupRequest({ subscription: { OfferCode: 'LEGACY-2019' } })), /Retired, not Active/],
    ['an unknown offer', () => client.signUp(signupRequest({ subscription: { OfferCode: 'NOPE' } })), /does not exist/],
    ['missing provisioning', () => client.signUp(signupRequest({ subscription: { OfferCode: 'FIBER-500' } })), /requires provisioning/],
    [
      'a missing provisioning field',
      () => client.signUp(signupRequest({ subscription: { OfferCode: 'FIBER-500', SubscriptionItems: [{ ProductCode: 'ROUTER', SubscriptionItemID: '', Fields: [] }] } })),
      /requires field SerialNumber/,
    ],
    ['provisioning an offer that takes none', () => client.signUp(signupRequest({ subscription: { SubscriptionItems: FIBER_ITEMS } })), /takes no provisioning/],
    ['a card failing Luhn', () => client.signUp(signupRequest({ card: { AccountNumber: '4111111111111112' } })), /AccountNumber/],
    ['an expired card', () => client.signUp(signupRequest({ card: { ExpirationDate: '0120' } })), /ExpirationDate/],
    ['a five-digit CVC', () => client.signUp(signupRequest({ card: { CVCode: '12345' } })), /CVCode/],
    [
      'a payment-method key differing from the path',
      () => client.updatePaymentMethod(SEED_PAYMENT_METHOD_KEYS[1], { CreditCard: { ...cardInfo(), PaymentMethodKey: SEED_PAYMENT_METHOD_KEYS[2] } }),
      /differs from the key in the path/,
    ],
  ])('refuses %s with 400 and the reason', async (_name, attempt, reason) => {
    const before = sandbox.store.customers().length;
    const error = await apiFailure(attempt());
    expect(error).toBeInstanceOf(ApiRefusedError);
    expect(error).toMatchObject({ status: 400, transient: false, maybeApplied: false });
    expect(error.apiMessage).toMatch(reason);
    expect(sandbox.store.customers().length).toBe(before);
  });

  it('refuses bodies that are not the interface shape', async () => {
    const body = { ...customerInput(), CustomerID: '1' };
    const extra = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: JSON.stringify(body) });
    expect(extra.status).toBe(400);
    expect(messageOf(extra.json)).toMatch(/CustomerID/);

    const { MobileNumber: _m, ...missing } = customerInput();
    const incomplete = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: JSON.stringify(missing) });
    expect(incomplete.status).toBe(400);
    expect(messageOf(incomplete.json)).toMatch(/MobileNumber/);

    const signupWithPassword = signupRequest();
    const withPassword = await rawRequest(`${sandbox.url}/json/signups`, {
      method: 'POST',
      body: JSON.stringify({ ...signupWithPassword, Customer: { ...signupWithPassword.Customer, Password: 'x' } }),
    });
    expect(withPassword.status).toBe(400);

    const notJson = await rawRequest(`${sandbox.url}/json/customers`, { method: 'POST', body: '{"FirstName": ' });
    expect(notJson.status).toBe(400);
    expect(messageOf(notJson.json)).toMatch(/not valid JSON/);

    const wrongMethod = await rawRequest(`${sandbox.url}/json/offers/STREAM-PLUS`, { method: 'DELETE' });
    expect(wrongMethod.status).toBe(405);
    const unknownPath = await rawRequest(`${sandbox.url}/json/nothing-here`);
    expect(unknownPath.status).toBe(404);
  });
});

describe('faults', () => {
  it("an answer echoing the request's card is an error that never holds it: message, words, stack, JSON", async () => {
    sandbox.setFaults({ echoCardData: 1 });
    const declined = await apiFailure(client.signUp(signupRequest({ card: { AccountNumber: '4111111111111111', CVCode: '737' } })));
    sandbox.setFaults({ echoCardDataStatus: 503 });
    const key = SEED_PAYMENT_METHOD_KEYS[0] ?? '';
    const failed = await apiFailure(client.updatePaymentMethod(key, { CreditCard: { ...cardInfo({ AccountNumber: '5555555555554444', CVCode: '1234' }), PaymentMethodKey: key } }));
    expect(declined).toMatchObject({ status: 400, transient: false, apiMessage: 'Card ************1111 (************1111) cvc *** was declined' });
    expect(failed).toMatchObject({ status: 503, transient: true });
    for (const error of [declined, failed]) {
      for (const text of [error.message, error.apiMessage ?? '', error.stack ?? '', JSON.stringify(error.toJSON())]) {
        expect(text).toContain('cvc ***');
        expect(text).not.toMatch(/4111\D?1111\D?1111\D?1111|5555\D?5555\D?5555\D?4444|\b737\b|\b1234\b/);
      }
    }
  });

  it('a 5xx before applying is transient, and nothing was created', async () => {
    sandbox.setFaults({ errorRate: 1 });
    const before = sandbox.store.customers().length;
    const error = await apiFailure(client.createCustomer(customerInput({ LastName: 'Fivehundred' })));
    expect(error).toBeInstanceOf(ApiServerError);
    // The client cannot tell a 5xx before applying from one after: it says "maybe".
    expect(error).toMatchObject({ status: 503, transient: true, maybeApplied: true, code: 'API_SERVER_ERROR' });
    expect(sandbox.store.customers().length).toBe(before);
    const read = await apiFailure(client.getOffer('STREAM-PLUS'));
    expect(read).toMatchObject({ status: 503, transient: true, maybeApplied: false });
  });

  it('a 5xx after applying is transient and maybe-applied, and the customer exists', async () => {
    sandbox.setFaults({ errorAfterApplyRate: 1 });
    const error = await apiFailure(client.createCustomer(customerInput({ FirstName: 'Applied', LastName: 'Afterwards' })));
    expect(error).toMatchObject({ status: 500, transient: true, maybeApplied: true });
    sandbox.setFaults(NO_FAULTS);
    const found = await client.searchCustomers({ contains: 'Afterwards', skip: 0, take: 10 });
    expect(found.TotalItemCount).toBe(1);
  });

  it('a 429 carries retryAfterMs, is transient and was not applied', async () => {
    sandbox.setFaults({ rateLimit: 2 });
    const before = sandbox.store.customers().length;
    const results = await Promise.allSettled([0, 1, 2, 3].map((i) => client.createCustomer(customerInput({ LastName: `Limited${i}` }))));
    const limited = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    expect(limited.length).toBe(2);
    for (const error of limited) {
      expect(error).toBeInstanceOf(ApiRateLimitedError);
      expect(error).toMatchObject({ status: 429, transient: true, maybeApplied: false });
      expect((error as ApiRateLimitedError).retryAfterMs).toBeGreaterThanOrEqual(1000);
    }
    expect(sandbox.store.customers().length).toBe(before + 2);
  });

  it('latency is honoured', async () => {
    sandbox.setFaults({ latencyMs: 150 });
    const started = performance.now();
    await client.getOffer('STREAM-PLUS');
    expect(performance.now() - started).toBeGreaterThanOrEqual(145);
  });

  it('a request slower than the timeout fails as a transient timeout that may have applied', async () => {
    // undici checks its headers timeout on a coarse (about one second) clock.
    sandbox.setFaults({ latencyMs: 3000 });
    const impatient = createApiClient({ baseUrl: sandbox.url, requestTimeoutMs: 300 });
    try {
      const error = await apiFailure(impatient.createCustomer(customerInput({ LastName: 'Slowpoke' })));
      expect(error).toBeInstanceOf(ApiTimeoutError);
      expect(error).toMatchObject({ code: 'API_TIMEOUT', transient: true, maybeApplied: true });
    } finally {
      await impatient.close();
    }
  });

  it('commit-then-drop leaves the customer created while the error says maybeApplied', async () => {
    sandbox.setFaults({ dropAfterCommitRate: 1 });
    const error = await apiFailure(client.createCustomer(customerInput({ FirstName: 'Dropped', LastName: 'Connexion' })));
    expect(error).toBeInstanceOf(ApiNetworkError);
    expect(error).toMatchObject({ code: 'API_NETWORK', transient: true, maybeApplied: true });
    sandbox.setFaults(NO_FAULTS);
    const found = await client.searchCustomers({ contains: 'Connexion', skip: 0, take: 10 });
    expect(found.Customers.map((c) => c.FirstName)).toEqual(['Dropped']);
    expect(sandbox.stats().faults.droppedAfterCommit).toBeGreaterThanOrEqual(1);
  });

  it('a refused connection is transient and certainly not applied', async () => {
    const gone = await startSandbox({ port: 0 });
    const url = gone.url;
    await gone.close();
    const orphan = createApiClient({ baseUrl: url });
    try {
      const error = await apiFailure(orphan.createCustomer(customerInput()));
      expect(error).toBeInstanceOf(ApiNetworkError);
      expect(error).toMatchObject({ transient: true, maybeApplied: false });
      expect(error.message).toMatch(/ECONNREFUSED/);
    } finally {
      await orphan.close();
    }
  });

  it('a 2xx whose body is not the interface shape is a bad response that may have applied', async () => {
    const liar = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ Message: 'OK', CustomerID: 42 }));
    });
    await new Promise<void>((resolve) => liar.listen(0, '127.0.0.1', resolve));
    const liarClient = createApiClient({ baseUrl: `http://127.0.0.1:${(liar.address() as AddressInfo).port}` });
    try {
      const error = await apiFailure(liarClient.createCustomer(customerInput()));
      expect(error).toBeInstanceOf(ApiBadResponseError);
      expect(error).toMatchObject({ transient: true, maybeApplied: true, status: 200 });
      expect(error.message).toMatch(/CustomerID/);
    } finally {
      await liarClient.close();
      await new Promise<void>((resolve) => {
        liar.close(() => resolve());
        liar.closeAllConnections();
      });
    }
  });
});
