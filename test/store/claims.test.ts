/**
 * A sent mark is a claim of one run, fenced by its job's lock; every mark and
 * settle bumps the rollback counter and returns it. On the test Redis, with
 * lock keys written by hand as BullMQ writes them (the job's lock key holds
 * the run's token).
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createImportStore, type ImportStore, type LedgerEntry, type RunClaim, type SeqWatch } from '../../src/store/importStore.js';
import { REDIS_URL, deleteKeys } from '../support/pipeline.js';
import { newPendingImport } from '../support/store.js';

const prefix = `claims-${randomBytes(4).toString('hex')}`;
let redis: Redis;
let store: ImportStore;
const seen: Array<{ seq: number; before: number }> = [];
let high = 0;
const watch: SeqWatch = {
  high: () => high,
  saw(seq, before) {
    seen.push({ seq, before });
    const rolledBack = seq <= before;
    high = Math.max(high, seq);
    return rolledBack;
  },
};

beforeAll(() => {
  redis = new Redis(REDIS_URL);
  store = createImportStore(redis, prefix, { seq: watch });
});
afterAll(async () => {
  redis.disconnect();
  await deleteKeys(prefix);
});

const pending: LedgerEntry = { cells: ['Ana', 'Lind'], job: 'customer.create', status: 'pending', attempts: 0 };

async function run(job: string): Promise<RunClaim> {
  const claim = { token: `${job}:${randomBytes(3).toString('hex')}`, lockKey: `${prefix}:subsync-rows:${job}:lock` };
  await redis.set(claim.lockKey, claim.token);
  return claim;
}

const newImport = (rows: number): Promise<string> => newPendingImport(store, rows, pending);

describe('sent marks as claims', () => {
  it('marks a pending row for the run that holds its lock, and refuses a run that lost it', async () => {
    const id = await newImport(2);
    const owner = await run('b1');
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['marked']);
    expect((await store.getRow(id, 1))?.status).toBe('sent');
    // The lock now holds another run's token (the job was taken over): the first run may send nothing.
    const taker = await run('b1');
    expect(await store.markSent(id, [{ row: 2, entry: pending, expect: 'pending' }], owner)).toEqual(['fenced']);
    expect((await store.getRow(id, 2))?.status).toBe('pending');
    // Nor write anything unsettled over the row.
    expect(await store.updateUnsettledRows(id, [{ row: 2, entry: { ...pending, attempts: 1 } }], owner)).toEqual([false]);
    expect(await store.markSent(id, [{ row: 2, entry: pending, expect: 'pending' }], taker)).toEqual(['marked']);
  });

  it('refuses a second run while the first holds the claim, and a run that decided from a stale pending', async () => {
    const id = await newImport(1);
    const first = await run('b2');
    const second = await run('r2');
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], first)).toEqual(['marked']);
    // Another live run: refused whatever it read.
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'sent' }], second)).toEqual(['claimed']);
    expect(await store.updateUnsettledRows(id, [{ row: 1, entry: pending }], second)).toEqual([false]);
    // The first run's lock goes (it died): a run that read the row back may take the claim over...
    await redis.del(first.lockKey);
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], second)).toEqual(['claimed']);
    expect(await store.markSent(id, [{ row: 1, entry: { ...pending, status: 'sent' }, expect: 'sent' }], second)).toEqual(['marked']);
    // ...and the same run marking again is no conflict.
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], second)).toEqual(['marked']);
    // Entries read back carry no claim.
    expect(await store.getRow(id, 1)).toEqual({ ...pending, status: 'sent' });
  });

  it('settles once; a run whose row another live run claims is refused, and the settle without a run is not', async () => {
    const id = await newImport(2);
    const first = await run('b3');
    const late = await run('b3x');
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], first)).toEqual(['marked']);
    const created: LedgerEntry = { ...pending, status: 'created', customerId: 'C1', attempts: 1 };
    const refused = await store.settleRows(id, [{ row: 1, entry: created, claim: late }]);
    expect(refused).toMatchObject({ applied: [false], claimed: [true] });
    // A run that lost its lock settles its own claim: its outcome is what its request did.
    await redis.del(first.lockKey);
    const own = await store.settleRows(id, [{ row: 1, entry: created, claim: first }]);
    expect(own).toMatchObject({ applied: [true], claimed: [false], settled: 1 });
    expect(await store.settleRows(id, [{ row: 1, entry: created, claim: first }])).toMatchObject({ applied: [false], claimed: [false] });
    // The producer, the sweep and the dashboard settle without a run.
    expect(await store.settleRows(id, [{ row: 2, entry: { ...pending, status: 'failed', note: 'x' } }])).toMatchObject({ applied: [true], settled: 2, complete: true });
  });

  it('holds every mark while a rollback is handled', async () => {
    const id = await newImport(1);
    const owner = await run('b4');
    await redis.set(store.keys.rollbackHold, '1', 'PX', 10_000);
    try {
      expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['held']);
      expect((await store.getRow(id, 1))?.status).toBe('pending');
    } finally {
      await redis.del(store.keys.rollbackHold);
    }
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['marked']);
  });
});

describe('the rollback counter', () => {
  it('is bumped by every mark and settle and returned to the watch, growing', async () => {
    const id = await newImport(3);
    const owner = await run('b5');
    seen.length = 0;
    await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner);
    await store.updateUnsettledRows(id, [{ row: 2, entry: { ...pending, attempts: 1 } }], owner);
    await store.settleRows(id, [{ row: 3, entry: { ...pending, status: 'failed', note: 'x' } }]);
    expect(seen).toHaveLength(3);
    for (const { seq, before } of seen) expect(seq).toBeGreaterThan(before);
    expect(Number(await redis.get(store.keys.seq))).toBe(high);
  });

  it('a mark answered by a Redis whose counter went back is held, not sent', async () => {
    const id = await newImport(1);
    const owner = await run('b6');
    // What a Redis that lost its last writes looks like from here: a counter below what was seen.
    await redis.set(store.keys.seq, String(Math.max(0, high - 10)));
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['held']);
    expect(seen.at(-1)?.seq).toBeLessThanOrEqual(seen.at(-1)?.before ?? 0);
  });
});
