import { describe, expect, it } from 'vitest';
import type { Customer, SearchQuery } from '../../src/api/schemas/index.js';
import { COMMON_SURNAMES, FIRST_NAMES, RARE_SURNAMES, personAt } from '../../src/sandbox/population.js';
import { CustomerSearchIndex, union } from '../../src/sandbox/searchIndex.js';
import { SEED_CUSTOMERS } from '../../src/sandbox/seed.js';
import { COLLECTION_METHOD, createStore, type SandboxStore } from '../../src/sandbox/store.js';
import { customerInput, signupRequest } from '../support/bodies.js';

/** The search as it was specified: a filter over every customer. */
function bruteForce(customers: readonly Customer[], { contains, skip, take }: SearchQuery): { ids: string[]; total: number } {
  const needle = contains.toLowerCase();
  const matches = customers.filter((c) => c.FirstName.toLowerCase().includes(needle) || c.LastName.toLowerCase().includes(needle));
  return { ids: matches.slice(skip, skip + take).map((c) => c.CustomerID), total: matches.length };
}

function indexed(store: SandboxStore, query: SearchQuery): { ids: string[]; total: number } {
  const { Customers, TotalItemCount } = store.searchCustomers(query);
  return { ids: Customers.map((c) => c.CustomerID), total: TotalItemCount };
}

/** A small seeded generator for the test's own choices. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 4294967296;
  };
}

const NEEDLES = [
  '', 'smith', 'SMITH', 'Smi', 'lee', 'LEE', 'een', 'ü', 'Müller', 'mül', 'zoë', 'josé', "o'", 'a', 'e', 'an', 'son', 'jo', 'kim',
  'nguyen', 'ashlee', 'leela', 'x', 'zz', 'no such name', 'Kathleen', 'ath', '-',
  ...RARE_SURNAMES.slice(0, 6), ...RARE_SURNAMES.slice(0, 3).map((name) => name.slice(1, 4)),
];

function expectSameAsBruteForce(store: SandboxStore, random: () => number, label: string): void {
  const customers = store.customers();
  for (const contains of NEEDLES) {
    const expected = bruteForce(customers, { contains, skip: 0, take: 100 });
    expect(indexed(store, { contains, skip: 0, take: 100 }), `${label}: "${contains}"`).toEqual(expected);
    const skip = Math.floor(random() * (expected.total + 5));
    const take = 1 + Math.floor(random() * 100);
    expect(indexed(store, { contains, skip, take }), `${label}: "${contains}" skip ${skip} take ${take}`).toEqual(
      bruteForce(customers, { contains, skip, take }),
    );
  }
}

describe('indexed customer search', () => {
  it('answers exactly as a filter over every customer, through creates, sign-ups and renames', () => {
    const random = seeded(11);
    const store = createStore({ seedCustomers: 3_000, seedRandom: 5 });
    expect(store.customerCount()).toBe(SEED_CUSTOMERS.length + 3_000);
    expectSameAsBruteForce(store, random, 'seeded');

    // Creates and sign-ups append; the cached answers above must grow with them.
    for (let i = 0; i < 200; i++) {
      const person = personAt(5, 10_000 + i);
      if (i % 3 === 0) store.signUp(signupRequest({ customer: { ...person } }));
      else store.createCustomer(customerInput({ ...person, LastName: i % 7 === 0 ? 'Smith' : person.LastName, FirstName: i % 5 === 0 ? 'Lee' : person.FirstName }));
    }
    store.createCustomer(customerInput({ FirstName: 'Lee', LastName: 'Lee', EmailAddress: 'lee.lee@example.com' }));
    expectSameAsBruteForce(store, random, 'after creates');

    // Renames: common to rare, rare to common, first names, case only, both names the same, and back.
    const ids = store.customers().map((c) => c.CustomerID);
    const pickId = (): string => ids[Math.floor(random() * ids.length)] ?? '100001';
    const renames: Array<{ FirstName?: string; LastName?: string }> = [
      { LastName: 'Smith' }, { LastName: RARE_SURNAMES[3] ?? 'Zz' }, { FirstName: 'Kathleen' }, { FirstName: 'LEE', LastName: 'lee' },
      { LastName: 'Brand-New-Name' }, { FirstName: 'Zoë', LastName: 'Müller' }, { LastName: 'SMITH' }, { FirstName: 'Colleen', LastName: 'Colleen' },
    ];
    for (let round = 0; round < 40; round++) {
      const id = pickId();
      const current = store.getCustomer(id);
      const change = renames[round % renames.length] ?? {};
      const { CustomerID: _id, CollectionMethod: _method, ...fields } = current;
      store.updateCustomer(id, { ...fields, ...change });
      if (round % 8 === 7) expectSameAsBruteForce(store, random, `after rename round ${round}`);
    }
    // An update that leaves the names alone changes nothing in the answers.
    const unchanged = store.getCustomer(ids[0] ?? '100001');
    const { CustomerID: _id, CollectionMethod: _method, ...fields } = unchanged;
    store.updateCustomer(unchanged.CustomerID, { ...fields, City: 'Elsewhere' });
    expectSameAsBruteForce(store, random, 'after an update keeping the names');
  });

  it('finds a customer by a rename to a name nobody had, and stops finding the old name', () => {
    const store = createStore({ seedCustomers: 500 });
    const target = store.customers()[100];
    if (!target) throw new Error('no customer at position 100');
    const { CustomerID, CollectionMethod: _method, ...fields } = target;
    expect(store.searchCustomers({ contains: 'quetzalcoatl', skip: 0, take: 10 }).TotalItemCount).toBe(0);
    const before = store.searchCustomers({ contains: target.LastName, skip: 0, take: 100 }).TotalItemCount;

    store.updateCustomer(CustomerID, { ...fields, LastName: 'Quetzalcoatl' });
    const found = store.searchCustomers({ contains: 'QUETZAL', skip: 0, take: 10 });
    expect(found.Customers.map((c) => c.CustomerID)).toEqual([CustomerID]);
    expect(store.searchCustomers({ contains: target.LastName, skip: 0, take: 100 }).TotalItemCount).toBe(before - 1);
  });

  it('counts the whole population for an empty search and pages deep in CustomerID order', () => {
    const store = createStore({ seedCustomers: 2_000 });
    const page = store.searchCustomers({ contains: '', skip: 1_990, take: 100 });
    expect(page.TotalItemCount).toBe(2_005);
    expect(page.Customers.map((c) => Number(c.CustomerID))).toEqual(Array.from({ length: 15 }, (_, i) => 100_001 + 1_990 + i));
    expect(page.Customers.every((c) => c.Password === '')).toBe(true);
  });

  it('seeds the population after the payment-method owners, as Invoice customers', () => {
    const store = createStore({ seedCustomers: 10, seedRandom: 3 });
    const customers = store.customers();
    expect(customers.slice(0, SEED_CUSTOMERS.length).map((c) => c.EmailAddress)).toEqual(SEED_CUSTOMERS.map((c) => c.EmailAddress));
    const seeded = customers.slice(SEED_CUSTOMERS.length);
    expect(seeded.map((c) => c.EmailAddress)).toEqual(Array.from({ length: 10 }, (_, i) => personAt(3, i).EmailAddress));
    expect(seeded.every((c) => c.CollectionMethod === COLLECTION_METHOD.created)).toBe(true);
    expect(customers.map((c) => c.CustomerID)).toEqual(Array.from({ length: 15 }, (_, i) => String(100_001 + i)));
    expect(createStore({ seed: false, seedCustomers: 3 }).customers().map((c) => c.LastName)).toEqual([0, 1, 2].map((i) => personAt(1, i).LastName));
    for (const bad of [-1, 2.5, Number.NaN]) expect(() => createStore({ seedCustomers: bad }), String(bad)).toThrow(RangeError);
  });

  it('still refuses unknown and non-canonical CustomerIDs', () => {
    const store = createStore({ seedCustomers: 5 });
    expect(store.getCustomer('100003').CustomerID).toBe('100003');
    for (const id of ['0100003', ' 100003', '100003.0', '1e5', '', '99999', '100011', 'abc']) {
      expect(() => store.getCustomer(id), id).toThrow(/was not found/);
    }
  });
});

describe('CustomerSearchIndex', () => {
  it('lists a customer once when both names contain the text', () => {
    const index = new CustomerSearchIndex();
    index.add('Colleen', 'Lee');
    index.add('Ann', 'Smith');
    index.add('Lee', 'Lee');
    expect(index.matching('lee')).toEqual([0, 2]);
    expect(index.matching('ee')).toEqual([0, 2]);
  });

  it('finds names containing the text even when a name holds it twice or the text holds a line break', () => {
    const index = new CustomerSearchIndex();
    index.add('Leelee', 'Ng');
    index.add('Ab', 'Cd');
    index.add('Ab\nCd', 'Ef');
    expect(index.matching('lee')).toEqual([0]);
    expect(index.matching('b\nc')).toEqual([2]);
    expect(index.matching('ab')).toEqual([1, 2]);
  });

  it('unites position lists in order without repeats, both ways', () => {
    expect(union([[1, 5, 9], [2, 5, 10], [0, 9]], 1_000)).toEqual([0, 1, 2, 5, 9, 10]); // sorting
    expect(union([[1, 5, 9], [2, 5, 10], [0, 9]], 12)).toEqual([0, 1, 2, 5, 9, 10]); // marking
    expect(union([], 10)).toEqual([]);
    const only = [3, 4];
    const copy = union([only], 10);
    expect(copy).toEqual([3, 4]);
    expect(copy).not.toBe(only);
  });
});

describe('name tables in the search', () => {
  it('finds every Smith and every "lee" of a seeded population', () => {
    const store = createStore({ seed: false, seedCustomers: 20_000, seedRandom: 2 });
    const customers = store.customers();
    for (const contains of ['smith', 'lee', (COMMON_SURNAMES[5] ?? '').toLowerCase(), (FIRST_NAMES[0] ?? '').toUpperCase()]) {
      const expected = bruteForce(customers, { contains, skip: 0, take: 100 });
      expect(expected.total, contains).toBeGreaterThan(100);
      expect(indexed(store, { contains, skip: 0, take: 100 })).toEqual(expected);
    }
  });
});
