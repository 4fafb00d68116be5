/**
 * The ledger (src/store/ledger.ts, src/store/importStore.ts) on real Redis:
 * its compact encoding, and its Lua scripts called directly: marking rows,
 * settling them once, telling when an import is complete, reopening.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodeEntry, encodeEntry, type LedgerEntry } from '../../src/store/ledger.js';
import { useStoreOnRedis } from '../support/store.js';

const t = useStoreOnRedis();

const pending = (n: number): LedgerEntry => ({ cells: [`First${n}`, 'Ledger', `l${n}@example.com`], job: 'customer.create', status: 'pending', attempts: 0 });

async function newImport(rows: number, options: { enqueued?: boolean } = {}): Promise<string> {
  const id = `ledger-${randomUUID().slice(0, 8)}`;
  await t.store.createImport({ id, file: 'l.csv', kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAddress'], paths: ['FirstName', 'LastName', 'EmailAddress'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
  await t.store.putPendingRows(id, Array.from({ length: rows }, (_, i) => ({ row: i + 1, entry: pending(i + 1) })));
  if (options.enqueued !== false) await t.store.markEnqueued(id, rows);
  return id;
}

describe('the ledger encoding', () => {
  it('keeps short keys in Redis and gives readable names back, every field round-tripped', async () => {
    const entry: LedgerEntry = {
      cells: ['A', 'B', 'a@example.com'],
      job: 'customer.upsert',
      status: 'needs-review',
      attempts: 3,
      customerId: '100001',
      subscriptionId: '7',
      paymentMethodKey: 'pm-1',
      note: 'two customers match',
      lastAttemptAt: 1_700_000_000_000,
      preexisting: ['100000'],
      candidates: ['100001', '100002'],
      handed: true,
    };
    expect(decodeEntry(encodeEntry(entry))).toEqual(entry);
    expect(Object.keys(JSON.parse(encodeEntry(entry)) as object).sort()).toEqual(['a', 'c', 'cand', 'cid', 'e', 'h', 'j', 'pmk', 'pre', 's', 'sid', 't']);
    // Fields left out stay out, in Redis and read back.
    expect(encodeEntry(pending(1))).toBe('{"s":"pending","c":["First1","Ledger","l1@example.com"],"j":"customer.create","a":0}');
    expect(decodeEntry(encodeEntry(pending(1)))).toEqual(pending(1));

    const id = await newImport(1);
    await t.store.updateUnsettled(id, 1, { ...pending(1), status: 'sent', attempts: 1, handed: true });
    expect(JSON.parse((await t.redis.hget(t.store.keys.ledger(id), '1')) ?? 'null')).toEqual({ c: ['First1', 'Ledger', 'l1@example.com'], j: 'customer.create', s: 'sent', a: 1, h: 1 });
    expect(await t.store.getRow(id, 1)).toEqual({ ...pending(1), status: 'sent', attempts: 1, handed: true });
  });

  it('encodes as JSON of the compact object would, field for field, and a row\'s cells changed in place afresh', () => {
    const claim = { token: 'tok-"1"', lockKey: 'bull:rows:7:lock' };
    const compact = (e: LedgerEntry, c?: typeof claim): string =>
      JSON.stringify({ s: c ? 'sent' : e.status, f: e.claimed ? 1 : undefined, k: c?.token, l: c?.lockKey, c: e.cells, j: e.job, a: e.attempts, cid: e.customerId, sid: e.subscriptionId, pmk: e.paymentMethodKey, e: e.note, t: e.lastAttemptAt, pre: e.preexisting, cand: e.candidates, h: e.handed ? 1 : undefined });
    const full: LedgerEntry = { cells: ['Zoë', 'O"Neil\\', 'z@example.com', ''], job: 'customer.upsert', status: 'needs-review', attempts: 2, customerId: '1', subscriptionId: '2', paymentMethodKey: 'pm', note: 'a "quoted" note\n', lastAttemptAt: 1_700_000_000_123, preexisting: [], candidates: ['1', '3'], handed: true, claimed: true };
    for (const entry of [pending(1), { ...pending(2), job: null }, full, { ...full, handed: false, claimed: false }]) {
      expect(encodeEntry(entry)).toBe(compact(entry));
      expect(encodeEntry(entry, claim)).toBe(compact(entry, claim));
    }
    const entry = pending(3);
    expect(encodeEntry(entry)).toBe(compact(entry));
    entry.cells[0] = 'Changed';
    expect(JSON.parse(encodeEntry(entry)).c).toEqual(['Changed', 'Ledger', 'l3@example.com']);
    entry.cells.push('more');
    expect(encodeEntry(entry)).toBe(compact(entry));
  });

  it('refuses an entry that is not one', () => {
    expect(() => decodeEntry('{"c":[],"j":"customer.create","s":"lost","a":0}')).toThrow();
  });
});

describe('the ledger scripts', () => {
  it('putPendingRows keeps what is there (a producer run again changes nothing)', async () => {
    const id = await newImport(2);
    await t.store.updateUnsettled(id, 1, { ...pending(1), status: 'sent', attempts: 1 });
    await t.store.putPendingRows(id, [{ row: 1, entry: pending(1) }, { row: 2, entry: pending(2) }]);
    expect(await t.store.getRows(id, [1, 2])).toEqual([{ ...pending(1), status: 'sent', attempts: 1 }, pending(2)]);
  });

  it('marks unsettled rows in one call, and refuses a row that has settled', async () => {
    const id = await newImport(3);
    await t.store.settle(id, 2, { ...pending(2), status: 'created', customerId: '100002', attempts: 1 });
    const written = await t.store.updateUnsettledRows(id, [
      { row: 1, entry: { ...pending(1), status: 'sent', attempts: 1 } },
      { row: 2, entry: { ...pending(2), status: 'sent', attempts: 2 } },
      { row: 3, entry: { ...pending(3), preexisting: [] } },
    ]);
    expect(written).toEqual([true, false, true]);
    expect(await t.store.getRows(id, [1, 2, 3])).toEqual([
      { ...pending(1), status: 'sent', attempts: 1 },
      { ...pending(2), status: 'created', customerId: '100002', attempts: 1 },
      { ...pending(3), preexisting: [] },
    ]);
  });

  it('settles each row once: counts move once, the figures of every run are added', async () => {
    const id = await newImport(3);
    const first = await t.store.settleRows(
      id,
      [
        { row: 1, entry: { ...pending(1), status: 'created', customerId: '1', attempts: 1 } },
        { row: 2, entry: { ...pending(2), status: 'failed', note: 'refused', attempts: 1 } },
      ],
      { apiCalls: 2, retries: 0, rateLimited: 0, searches: 0, reads: 0 },
    );
    expect(first).toMatchObject({ applied: [true, true], settled: 2, complete: false, round: 0 });
    // Another run settles row 1 too (its answer was late): refused, its calls still counted.
    const second = await t.store.settleRows(id, [{ row: 1, entry: { ...pending(1), status: 'reconciled', customerId: '1', attempts: 2 } }], { apiCalls: 1, retries: 1, rateLimited: 0, searches: 1, reads: 0 });
    expect(second).toMatchObject({ applied: [false], settled: 2, complete: false });
    expect(await t.store.getRow(id, 1)).toMatchObject({ status: 'created', attempts: 1 });
    const counts = await t.store.counts(id);
    expect(counts).toMatchObject({ settled: 2, apiCalls: 3, retries: 1, searches: 1 });
    expect(counts.byStatus).toMatchObject({ created: 1, failed: 1, reconciled: 0 });
  });

  it('tells complete once: by the settle of the last row, and not again', async () => {
    const id = await newImport(2);
    expect((await t.store.settle(id, 1, { ...pending(1), status: 'created', customerId: '1' })).complete).toBe(false);
    expect(await t.store.settle(id, 2, { ...pending(2), status: 'created', customerId: '2' })).toMatchObject({ applied: true, complete: true, settled: 2, round: 0 });
    // A late settle of a settled row changes nothing and completes nothing.
    expect(await t.store.settle(id, 2, { ...pending(2), status: 'failed' })).toMatchObject({ applied: false, complete: false });
  });

  it('an import whose rows all settled before its total was known is complete when the total is recorded', async () => {
    const id = await newImport(2, { enqueued: false });
    expect((await t.store.settle(id, 1, { ...pending(1), status: 'invalid', job: null })).complete).toBe(false);
    expect((await t.store.settle(id, 2, { ...pending(2), status: 'created', customerId: '2' })).complete).toBe(false);
    expect(await t.store.markEnqueued(id, 2)).toEqual({ settled: 2, complete: true, round: 0 });
  });

  it('reopens a settled row for a retry: out of its count, a new round, and again complete when it settles', async () => {
    const id = await newImport(1);
    await t.store.settle(id, 1, { ...pending(1), status: 'failed', note: 'refused', attempts: 1 });
    expect(await t.store.reopenRow(id, 1, { ...pending(1), attempts: 1, handed: true })).toBe(1);
    expect(await t.store.reopenRow(id, 1, { ...pending(1), attempts: 1, handed: true })).toBeUndefined();
    expect((await t.store.counts(id)).byStatus.failed).toBe(0);
    expect(await t.store.settle(id, 1, { ...pending(1), status: 'created', customerId: '1', attempts: 2 })).toMatchObject({ applied: true, complete: true, round: 1 });
  });

  it('marks a round finished only while it is the current one', async () => {
    const id = await newImport(1);
    await t.store.settle(id, 1, { ...pending(1), status: 'failed', note: 'refused' });
    await t.store.reopenRow(id, 1, pending(1));
    expect(await t.store.markFinished(id, 0, '/tmp/r0', 60)).toBe(false);
    expect(await t.store.markFinished(id, 1, '/tmp/r1', 60)).toBe(true);
    expect(await t.store.getImport(id)).toMatchObject({ round: 1, resultsDir: '/tmp/r1' });
  });
});

describe('the ledger encoding, read without a parse on the hot path', () => {
  it('refuses what is not an entry, naming the field', () => {
    const good = { c: ['x'], j: 'customer.create', s: 'sent', a: 1 };
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ ...good, s: 'lost' }, 's'],
      [{ ...good, j: 'customer.delete' }, 'j'],
      [{ ...good, a: -1 }, 'a'],
      [{ ...good, a: 1.5 }, 'a'],
      [{ ...good, c: ['x', 2] }, 'c'],
      [{ ...good, h: true }, 'h'],
      [{ ...good, f: 2 }, 'f'],
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
