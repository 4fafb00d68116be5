/**
 * Identities held by more than one customer, for `GET /_sandbox/duplicates`:
 * a test that imported 100,000 people checks "nobody was created twice"
 * without downloading every customer.
 */
import type { Customer } from '../api/schemas/index.js';

/** An identity held by several customers, its parts trimmed and lower-cased. */
export interface DuplicateIdentity {
  FirstName: string;
  LastName: string;
  EmailAddress: string;
  /** Ascending. */
  CustomerIDs: string[];
}

type Identity = readonly [first: string, last: string, email: string];

function identityOf(customer: Customer): Identity {
  return [customer.FirstName.trim().toLowerCase(), customer.LastName.trim().toLowerCase(), customer.EmailAddress.trim().toLowerCase()];
}

/**
 * Every identity (first name, last name, email) held by more than one of
 * `customers`, in order of the first holder. Works in two typed arrays the size
 * of the population (a hash per customer and an open-addressing table of first
 * holders) rather than a map of a million strings; identities are compared in
 * full only when their hashes agree.
 */
export function findDuplicateIdentities(customers: readonly Customer[]): DuplicateIdentity[] {
  const capacity = tableCapacity(customers.length);
  const mask = capacity - 1;
  // Position + 1 of the first customer seen with an identity; 0 = empty slot.
  const table = new Int32Array(capacity);
  const hashes = new Uint32Array(customers.length);
  const holders = new Map<number, number[]>();

  customers.forEach((customer, position) => {
    const identity = identityOf(customer);
    const hash = hashIdentity(identity);
    hashes[position] = hash;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const held = table[slot] ?? 0;
      if (held === 0) {
        table[slot] = position + 1;
        return;
      }
      const first = held - 1;
      const other = customers[first];
      if (hashes[first] === hash && other && sameIdentity(identityOf(other), identity)) {
        const list = holders.get(first) ?? [first];
        list.push(position);
        holders.set(first, list);
        return;
      }
    }
  });

  return [...holders.entries()]
    .sort(([a], [b]) => a - b)
    .map(([first, positions]) => {
      const [FirstName, LastName, EmailAddress] = identityOf(customers[first] as Customer);
      return { FirstName, LastName, EmailAddress, CustomerIDs: positions.map((p) => (customers[p] as Customer).CustomerID) };
    });
}

/** A power of two at least twice the count, so probe runs stay short. */
function tableCapacity(count: number): number {
  let capacity = 16;
  while (capacity < count * 2) capacity *= 2;
  return capacity;
}

function sameIdentity(a: Identity, b: Identity): boolean {
  return a[0] === b[0] && a[1] === b[1] && a[2] === b[2];
}

/** FNV-1a over the three parts, a separator after each; equal hashes are confirmed part by part. */
function hashIdentity(identity: Identity): number {
  let h = 2166136261;
  for (const part of identity) {
    for (let i = 0; i < part.length; i++) h = Math.imul(h ^ part.charCodeAt(i), 16777619);
    h = Math.imul(h ^ 0x10000, 16777619);
  }
  return h >>> 0;
}
