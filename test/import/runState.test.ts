import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  cancelRun,
  concludeCanaryRun,
  gateOf,
  inboxPausedSince,
  markRunCancelled,
  pauseInbox,
  pauseRun,
  readRunState,
  resumeInbox,
  resumeRun,
  runStateCache,
  runStatusOf,
  startCanary,
} from '../../src/import/runState.js';
import { createImportStore, type ImportStore, type LedgerEntry } from '../../src/store/importStore.js';
import { deleteKeys, REDIS_URL } from '../support/pipeline.js';

describe('gateOf: what a worker does with a row', () => {
  it('runs, holds or cancels by the run state and a canary\'s hold', () => {
    expect(gateOf({ state: 'running' }, 7)).toBe('go');
    expect(gateOf({ state: 'paused' }, 1)).toBe('hold');
    expect(gateOf({ state: 'cancelling' }, 1)).toBe('cancel');
    expect(gateOf({ state: 'cancelled' }, 1)).toBe('cancel');
    const canary = runStatusOf({ state: 'running', canaryRows: '5', canaryMaxFailures: '1', holdFrom: '6' });
    expect(canary).toEqual({ state: 'running', canaryRows: 5, canaryMaxFailures: 1, holdFrom: 6 });
    expect(gateOf(canary, 5)).toBe('go');
    expect(gateOf(canary, 6)).toBe('hold');
    expect(runStatusOf({})).toEqual({ state: 'running' });
    expect(runStatusOf({ state: 'bogus' }).state).toBe('running');
  });
});

describe('run state and the ledger\'s cancel rule, on real Redis', () => {
  let redis: Redis;
  let prefix: string;
  let store: ImportStore;
  beforeAll(() => {
    redis = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    await redis.quit();
  });
  afterEach(async () => {
    await deleteKeys(prefix);
  });

  const entry = (status: LedgerEntry['status'], extra: Partial<LedgerEntry> = {}): LedgerEntry => ({ cells: ['Ana', 'Berg'], job: 'customer.update', status, attempts: 0, ...extra });

  async function start(rows: LedgerEntry[]): Promise<string> {
    prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
    store = createImportStore(redis, prefix);
    const id = 'imp1';
    await store.createImport({ id, file: 'f.csv', kind: 'customers', headers: ['FirstName', 'LastName'], paths: ['FirstName', 'LastName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
    await store.putPendingRows(id, rows.map((e, i) => ({ row: i + 1, entry: e })));
    await store.markEnqueued(id, rows.length);
    return id;
  }

  it('once cancelling, marking an unclaimed pending row sent (or claiming it) is refused; a row already sent or claimed goes on', async () => {
    const id = await start([entry('pending'), entry('pending'), entry('sent'), entry('pending', { claimed: true })]);
    // Running: marks go through.
    expect(await store.updateUnsettledRows(id, [{ row: 1, entry: entry('sent') }])).toEqual([true]);
    expect((await cancelRun(redis, store.keys, id)).before).toBe('running');
    expect(await store.updateUnsettledRows(id, [
      { row: 2, entry: entry('sent') },
      { row: 2, entry: entry('pending', { claimed: true }) },
      { row: 3, entry: entry('sent', { attempts: 2 }) },
      { row: 4, entry: entry('sent', { claimed: true }) },
    ])).toEqual([false, false, true, true]);
    // A write that takes nothing (back to pending after a refused request) is not refused.
    expect(await store.updateUnsettledRows(id, [{ row: 2, entry: entry('pending', { attempts: 1 }) }])).toEqual([true]);
    expect((await store.getRow(id, 2))?.status).toBe('pending');
  });

  it('a cancel settles only pending unclaimed rows; the worker holding a claimed one settles it; each once', async () => {
    const id = await start([entry('pending'), entry('sent'), entry('pending', { claimed: true }), entry('created'), entry('pending')]);
    await cancelRun(redis, store.keys, id);
    expect(await store.unclaimedPendingRows(id)).toEqual([1, 5]);
    const first = await store.settleCancelled(id, [1, 2, 3, 4, 5], 'unclaimed');
    expect(first.applied).toEqual([true, false, false, false, true]);
    expect(first.complete).toBe(false);
    // Again: nothing moves twice.
    expect((await store.settleCancelled(id, [1, 5], 'unclaimed')).applied).toEqual([false, false]);
    // The worker that claimed row 3 finds the import cancelling: it settles it; a sent row is never cancelled.
    expect((await store.settleCancelled(id, [3, 2], 'pending')).applied).toEqual([true, false]);
    const counts = await store.counts(id);
    expect(counts.byStatus.cancelled).toBe(3);
    expect(counts.settled).toBe(3);
    // The entry is kept as it was, but for its state.
    expect(await store.getRow(id, 3)).toEqual(entry('cancelled', { claimed: true }));
    // The sent row settles as it would have; then the import is complete.
    const last = await store.settleRows(id, [{ row: 2, entry: entry('updated') }]);
    expect(last.complete).toBe(false);
    expect((await store.counts(id)).settled).toBe(4);
  });

  it('pause, resume, cancel: the moves allowed, and a canary concluded once', async () => {
    const id = await start([entry('pending')]);
    const keys = store.keys;
    expect(await pauseRun(redis, keys, id)).toMatchObject({ before: 'running', after: 'paused', changed: true });
    expect(await pauseRun(redis, keys, id)).toMatchObject({ before: 'paused', changed: false });
    expect(await resumeRun(redis, keys, id)).toMatchObject({ before: 'paused', after: 'running' });
    await startCanary(redis, keys, id, 5, 1);
    expect((await readRunState(redis, keys, id)).holdFrom).toBe(6);
    expect(await concludeCanaryRun(redis, keys, id, 2, 'too many')).toBe('paused');
    expect(await concludeCanaryRun(redis, keys, id, 2, 'too many')).toBe('none');
    expect(await readRunState(redis, keys, id)).toMatchObject({ state: 'paused', reason: 'too many', canaryRows: 5 });
    expect((await readRunState(redis, keys, id)).holdFrom).toBeUndefined();
    expect(await cancelRun(redis, keys, id)).toMatchObject({ before: 'paused', after: 'cancelling' });
    expect(await resumeRun(redis, keys, id)).toMatchObject({ before: 'cancelling', changed: false });
    expect(await markRunCancelled(redis, keys, id)).toMatchObject({ after: 'cancelled' });
    expect(await cancelRun(redis, keys, id)).toMatchObject({ before: 'cancelled', changed: false });
  });

  it('a canary within its bound lets the rest run; the cache reads at most once per interval', async () => {
    const id = await start([entry('pending')]);
    await startCanary(redis, store.keys, id, 3, 1);
    const cache = runStateCache(redis, store.keys, 60_000);
    expect((await cache.get(id)).holdFrom).toBe(4);
    expect(await concludeCanaryRun(redis, store.keys, id, 1, 'ok')).toBe('passed');
    // Still the cached read, until forgotten.
    expect((await cache.get(id)).holdFrom).toBe(4);
    cache.forget(id);
    expect(await cache.get(id)).toMatchObject({ state: 'running' });
    expect((await cache.get(id)).holdFrom).toBeUndefined();
  });

  it('the inbox pause is one key: paused, told since when, resumed', async () => {
    prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
    const keys = createImportStore(redis, prefix).keys;
    expect(await inboxPausedSince(redis, keys)).toBeUndefined();
    expect(await pauseInbox(redis, keys, 1234)).toBe(true);
    expect(await pauseInbox(redis, keys, 5678)).toBe(false);
    expect(await inboxPausedSince(redis, keys)).toBe(1234);
    expect(await resumeInbox(redis, keys)).toBe(true);
    expect(await resumeInbox(redis, keys)).toBe(false);
  });
});
