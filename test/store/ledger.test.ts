import { describe, expect, it } from 'vitest';
import { decodeEntry, encodeEntry, type LedgerEntry } from '../../src/store/ledger.js';

describe('ledger entries', () => {
  it('read back as written, every field', () => {
    const entries: LedgerEntry[] = [
      { cells: ['Zoë', "O'Connor", 'z@example.com'], job: 'customer.create', status: 'pending', attempts: 0 },
      {
        cells: ['a', ''],
        job: 'customer.upsert',
        status: 'needs-review',
        attempts: 3,
        lastAttemptAt: 1_795_000_000_000,
        customerId: '12',
        subscriptionId: '7',
        paymentMethodKey: 'pm-1',
        note: 'retries ran out',
        preexisting: ['4'],
        candidates: ['4', '9'],
        handed: true,
      },
      { cells: [], job: null, status: 'invalid', attempts: 0, note: 'EmailAddress: not an email' },
    ];
    for (const entry of entries) expect(decodeEntry(encodeEntry(entry))).toEqual(entry);
  });

  it('refuses what is not an entry, naming the field', () => {
    const good = { c: ['x'], j: 'customer.create', s: 'sent', a: 1 };
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ ...good, s: 'lost' }, 's'],
      [{ ...good, j: 'customer.delete' }, 'j'],
      [{ ...good, a: -1 }, 'a'],
      [{ ...good, a: 1.5 }, 'a'],
      [{ ...good, c: ['x', 2] }, 'c'],
      [{ ...good, h: true }, 'h'],
      [{ ...good, cand: 'x' }, 'cand'],
      [{ ...good, t: '12' }, 't'],
    ];
    for (const [value, field] of bad) expect(() => decodeEntry(JSON.stringify(value)), JSON.stringify(value)).toThrow(new RegExp(`"${field}"`));
    expect(() => decodeEntry('[1]')).toThrow();
    expect(() => decodeEntry('null')).toThrow();
  });

  it('leaves out keys it does not know, as the schema does', () => {
    expect(decodeEntry(JSON.stringify({ c: [], j: null, s: 'invalid', a: 0, zz: 1 }))).toEqual({ cells: [], job: null, status: 'invalid', attempts: 0 });
  });
});
