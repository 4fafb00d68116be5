/**
 * A page of a customer search (src/customers/search.ts) retried by the one
 * retry decision, against the sandbox over HTTP.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ApiRefusedError } from '../../src/api/errors.js';
import { searchPage } from '../../src/customers/search.js';
import { openRowsWorld, type RowsWorld } from '../support/rows.js';

let world: RowsWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

const backoff = { baseMs: 5, capMs: 20 };
const query = { contains: 'Delacroix', skip: 0, take: 100 };

describe('searchPage', () => {
  it('retries a failure that is not the API\'s (the budget\'s Redis blinking before the request), as a row would', async () => {
    world = await openRowsWorld();
    const w = world;
    let blinks = 1;
    w.beforeRequest(async () => {
      if (blinks-- > 0) throw new Error('Connection is closed.');
    });
    const page = await searchPage({ api: w.api, budget: w.budget, backoff }, query);
    expect(page.Customers.map((c) => c.LastName)).toEqual(['Delacroix']);
    expect(w.requests).toHaveLength(1);
  });

  it('gives up once its attempts are spent, with the last error', async () => {
    world = await openRowsWorld();
    const w = world;
    let tries = 0;
    w.beforeRequest(async () => {
      tries++;
      throw new Error('Connection is closed.');
    });
    await expect(searchPage({ api: w.api, budget: w.budget, backoff, attempts: 3 }, query)).rejects.toThrow('Connection is closed.');
    expect(tries).toBe(3);
    expect(w.requests).toHaveLength(0);
  });

  it('throws a refusal at once, and waits out a 429 without spending an attempt', async () => {
    world = await openRowsWorld();
    const w = world;
    w.refuseNext('searchCustomers', 400, 'Contains must be shorter');
    await expect(searchPage({ api: w.api, budget: w.budget, backoff }, query)).rejects.toBeInstanceOf(ApiRefusedError);
    expect(w.requests).toHaveLength(1);

    w.refuseNext('searchCustomers', 429, 'Too many requests');
    const page = await searchPage({ api: w.api, budget: w.budget, backoff, attempts: 1 }, query);
    expect(page.TotalItemCount).toBe(1);
    expect(w.requests).toHaveLength(3);
  });
});
