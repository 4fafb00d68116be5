import { describe, expect, it } from 'vitest';
import type { Customer } from '../../src/api/schemas/index.js';
import { findDuplicateIdentities } from '../../src/sandbox/duplicates.js';
import { personAt } from '../../src/sandbox/population.js';

function customer(position: number, fields: Pick<Customer, 'FirstName' | 'LastName' | 'EmailAddress'>): Customer {
  return {
    ...personAt(1, position), ...fields, CustomerID: String(100_001 + position), CollectionMethod: 'Invoice', Password: '',
  };
}

describe('findDuplicateIdentities', () => {
  it('groups exactly the customers sharing trimmed, lower-cased first name, last name and email', () => {
    const customers = Array.from({ length: 5_000 }, (_, i) => customer(i, personAt(1, i)));
    const copy = (of: number, at: number, change: (c: Customer) => Partial<Customer> = () => ({})): void => {
      const original = customers[of];
      if (!original) throw new Error(`no customer ${of}`);
      customers.push(customer(at, { FirstName: original.FirstName, LastName: original.LastName, EmailAddress: original.EmailAddress, ...change(original) }));
    };
    copy(10, 5_000, (c) => ({ FirstName: ` ${c.FirstName.toUpperCase()}` }));
    copy(10, 5_001, (c) => ({ EmailAddress: `${c.EmailAddress.toUpperCase()} ` }));
    copy(20, 5_002);
    // Near misses: another email, or the name parts swapped between fields.
    copy(30, 5_003, (c) => ({ EmailAddress: `x${c.EmailAddress}` }));
    copy(40, 5_004, (c) => ({ FirstName: c.LastName, LastName: c.FirstName }));

    const found = findDuplicateIdentities(customers);
    expect(found.map((d) => d.CustomerIDs)).toEqual([
      ['100011', '105001', '105002'],
      ['100021', '105003'],
    ]);
    const first = customers[10];
    expect(found[0]).toMatchObject({
      FirstName: first?.FirstName.toLowerCase(),
      LastName: first?.LastName.toLowerCase(),
      EmailAddress: first?.EmailAddress.toLowerCase(),
    });
  });

  it('finds nothing among distinct people, and nothing in an empty store', () => {
    expect(findDuplicateIdentities(Array.from({ length: 3_000 }, (_, i) => customer(i, personAt(2, i))))).toEqual([]);
    expect(findDuplicateIdentities([])).toEqual([]);
  });
});
