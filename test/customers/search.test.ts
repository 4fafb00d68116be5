/**
 * A page of a customer search (src/customers/search.ts) retried by the one
 * retry decision, against the sandbox over HTTP.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ApiRefusedError } from '../../src/api/errors.js';
import { compareIds, searchPage, sortableId } from '../../src/customers/search.js';
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

describe('sortableId', () => {
  it("sorts byte by byte as compareIds orders the IDs, leading zeros and all", () => {
    const ids = ['0', '00', '7', '007', '10', '9', '99', '100', '0100', '12345678901234567890', '12345678901234567891', '2', 'a', 'ab', 'b1', '1b'];
    for (let i = 0; i < 2000; i++) ids.push(String(Math.floor(Math.random() * 10 ** (1 + (i % 15)))).padStart(1 + (i % 17), i % 3 === 0 ? '0' : ' ').trim());
    for (const a of ids) {
      for (const b of ids.slice(0, 60)) {
        const [x, y] = [sortableId(a), sortableId(b)];
        if (x === undefined || y === undefined) throw new Error(`no sortableId for ${a} or ${b}`);
        expect(Math.sign(Buffer.compare(Buffer.from(x), Buffer.from(y))), `${a} against ${b}`).toBe(Math.sign(compareIds(a, b)));
      }
    }
  });

  it('has none for an ID whose bytes might not sort as its characters do', () => {
    expect(sortableId('café')).toBeUndefined();
    expect(sortableId('a b')).toBeUndefined();
    expect(sortableId('')).toBeUndefined();
  });
});
