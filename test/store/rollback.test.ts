/**
 * Rollback detection on the test Redis: a counter below what a process (or
 * its data dir) saw puts every unfinished import in read-back mode, records
 * the rollback, raises the counter again and tells the operator.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { createImportStore, type ImportStore, type LedgerEntry } from '../../src/store/importStore.js';
import { MarkInDoubtError, memoryFile, openRollbackWatch, recentRollbacks } from '../../src/store/rollback.js';
import { Slots, slottedApi } from '../../src/rows/coalesce.js';
import type { ApiClient } from '../../src/api/client.js';
import { REDIS_URL, deleteKeys } from '../support/pipeline.js';
import { newPendingImport } from '../support/store.js';

const prefix = `rollback-${randomBytes(4).toString('hex')}`;
let redis: Redis;
let store: ImportStore;
let dataDir: string;
let logged = '';
const logger = createLogger({
  level: 'info',
  destination: new Writable({
    write(chunk: Buffer, _encoding, done) {
      logged += chunk.toString();
      done();
    },
  }),
});

beforeAll(async () => {
  redis = new Redis(REDIS_URL);
  store = createImportStore(redis, prefix);
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'subsync-rollback-'));
});
afterAll(async () => {
  redis.disconnect();
  await deleteKeys(prefix);
  await rm(dataDir, { recursive: true, force: true });
});

const pending: LedgerEntry = { cells: ['Ana', 'Lind'], job: 'customer.create', status: 'pending', attempts: 0 };

const newImport = (rows: number): Promise<string> => newPendingImport(store, rows, pending);

/** A rollback watch on the store (no timers), an import of `rows` pending rows, and a run holding its job's lock as `token`. */
async function watchedImport(rows: number, token: string): Promise<{ watch: Awaited<ReturnType<typeof openRollbackWatch>>['watch']; id: string; owner: { token: string; lockKey: string } }> {
  const { watch } = await openRollbackWatch({ redis, store, prefix, dataDir, logger, timers: false });
  store.watchSeq(watch);
  const id = await newImport(rows);
  const owner = { token, lockKey: `${prefix}:subsync-rows:${token}:lock` };
  await redis.set(owner.lockKey, owner.token);
  return { watch, id, owner };
}

describe('rollback detection', () => {
  it('a counter that went back puts unfinished imports in read-back mode, and the data dir remembers across processes', async () => {
    const { watch } = await openRollbackWatch({ redis, store, prefix, dataDir, logger, timers: false });
    store.watchSeq(watch);
    const running = await newImport(3);
    const finished = await newImport(1);
    await store.settleRows(finished, [{ row: 1, entry: { ...pending, status: 'created', customerId: 'C9' } }]);
    await store.markFinished(finished, 0, '/tmp/x', 3600);
    const owner = { token: 't1', lockKey: `${prefix}:subsync-rows:b1:lock` };
    await redis.set(owner.lockKey, owner.token);
    expect(await store.markSent(running, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['marked']);
    await store.settleRows(running, [{ row: 2, entry: { ...pending, status: 'created', customerId: 'C2' } }]);
    const high = watch.high();
    expect(high).toBeGreaterThan(0);
    await watch.close();
    // The data dir remembers the highest value this process saw.
    expect(JSON.parse(await readFile(memoryFile(dataDir, prefix), 'utf8'))).toMatchObject({ high });

    // Redis comes back without its last writes: the counter (and, say, the mark of row 1) went back.
    await redis.set(store.keys.seq, String(high - 2));
    // The owner's lock went with the loss: its claim is dead.
    await redis.del(owner.lockKey);
    logged = '';
    // A new process of the fleet, starting from the same data dir, finds it.
    const second = await openRollbackWatch({ redis, store, prefix, dataDir, logger, timers: false });
    expect(second.found).toMatchObject({ from: high, to: high - 2, imports: [running], rows: 2, how: 'start' });
    // Every row of the running import without an outcome, pending or sent, is now sent without a claim: read back first.
    const rows = await store.getRows(running, [1, 2, 3]);
    expect(rows.map((r) => r?.status)).toEqual(['sent', 'created', 'sent']);
    expect(JSON.parse((await redis.hget(store.keys.ledger(running), '1')) ?? '{}')).not.toHaveProperty('k');
    expect((await store.getImport(running))?.readBack).toBe(second.found?.at);
    expect((await store.getImport(finished))?.readBack).toBeUndefined();
    // The counter is raised above what was seen, the hold is lifted, the rollback recorded, the operator told.
    expect(Number(await redis.get(store.keys.seq))).toBeGreaterThan(high);
    expect(await redis.exists(store.keys.rollbackHold)).toBe(0);
    expect((await recentRollbacks(redis, store))[0]).toMatchObject({ from: high, imports: [running] });
    expect(logged).toMatch(/Redis lost acknowledged writes.*went back from \d+ to \d+.*1 unfinished import\(s\) put in read-back mode.*appendfsync always/);
    // Once handled, the same values are no rollback.
    expect(await second.watch.check('periodic check')).toBeUndefined();
    await second.watch.close();
  });

  it('what the data dir remembers of another Redis data set is no rollback of this one', async () => {
    const other = `${prefix}-other`;
    const otherStore = createImportStore(redis, other);
    await redis.set(`${other}:instance`, JSON.stringify({ id: 'data-set-a', since: 1 }));
    await redis.set(otherStore.keys.seq, '500');
    const first = await openRollbackWatch({ redis, store: otherStore, prefix: other, dataDir, logger, timers: false });
    expect(first.watch.high()).toBe(500);
    first.watch.saw(501, 500);
    await first.watch.close();
    expect(JSON.parse(await readFile(memoryFile(dataDir, other), 'utf8'))).toMatchObject({ high: 501, instance: 'data-set-a' });
    // REDIS_URL now names another Redis, whose data set is another one, with a lower counter.
    await redis.set(`${other}:instance`, JSON.stringify({ id: 'data-set-b', since: 2 }));
    await redis.set(otherStore.keys.seq, '7');
    const second = await openRollbackWatch({ redis, store: otherStore, prefix: other, dataDir, logger, timers: false });
    expect(second.found).toBeUndefined();
    expect(await recentRollbacks(redis, otherStore)).toEqual([]);
    await second.watch.close();
    await deleteKeys(other);
  });

  it('a mark answered below what was seen is held and handled at once', async () => {
    const { watch, id, owner } = await watchedImport(1, 't2');
    await watch.check('start');
    await redis.set(store.keys.seq, String(watch.high() - 5));
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['held']);
    await watch.settled();
    expect((await recentRollbacks(redis, store))[0]).toMatchObject({ how: 'a mark or settle', imports: expect.arrayContaining([id]) });
    // Its own live claim is kept: the run that holds it was told to hold, not to send.
    expect(JSON.parse((await redis.hget(store.keys.ledger(id), '1')) ?? '{}')).toMatchObject({ s: 'sent', k: 't2' });
    await watch.close();
  });

  it('a Redis server other than the one the fleet checked refuses every mark until a process has put the imports in read-back mode', async () => {
    const { watch, id, owner } = await watchedImport(2, 't3');
    // The start check wrote the server it checked: marks go.
    const server = await redis.get(store.keys.checkedRun);
    expect(server).toMatch(/^\w{40}$/);
    expect(await store.markSent(id, [{ row: 1, entry: pending, expect: 'pending' }], owner)).toEqual(['marked']);
    // Redis came back from persistence written by another server (a restart, a failover): the key names that one.
    // Row 2's create went out and its mark was lost; this process's counter saw nothing wrong.
    await redis.set(store.keys.checkedRun, 'e'.repeat(40));
    expect(await store.markSent(id, [{ row: 2, entry: pending, expect: 'pending' }], owner)).toEqual(['held']);
    expect((await store.getRow(id, 2))?.status).toBe('pending');
    // The next check (this Redis does not fsync every write) handles it as a rollback, and marks go again.
    expect(await watch.check('periodic check')).toMatchObject({ how: 'periodic check, Redis having restarted since the fleet last checked it', imports: expect.arrayContaining([id]) });
    expect(await redis.get(store.keys.checkedRun)).toBe(server);
    expect((await store.getRow(id, 2))?.status).toBe('sent');
    expect(await store.markSent(id, [{ row: 2, entry: pending, expect: 'sent' }], owner)).toEqual(['marked']);
    await watch.close();
  });

  it('a create that waited for a request slot across a lost connection to Redis does not leave; one that did not, does', async () => {
    const { watch } = await openRollbackWatch({ redis, store, prefix, dataDir, logger, timers: false });
    const sent: string[] = [];
    const api = { createCustomer: async (body: { LastName: string }) => (sent.push(body.LastName), { CustomerID: '1' }) } as unknown as ApiClient;
    const slots = new Slots(1);
    const slotted = slottedApi(api, slots, () => watch.epoch());
    // The only slot is taken: the create, its row marked sent, waits; meanwhile Redis goes away (its mark may go with it).
    await slots.take();
    const waiting = slotted.createCustomer({ LastName: 'Waited' } as never);
    watch.connectionLost();
    slots.give();
    await expect(waiting).rejects.toBeInstanceOf(MarkInDoubtError);
    // A rollback found grows the epoch too; a create marked after it leaves.
    const before = watch.epoch();
    await redis.set(store.keys.checkedRun, 'f'.repeat(40));
    await watch.check('periodic check');
    expect(watch.epoch()).toBeGreaterThan(before);
    await slotted.createCustomer({ LastName: 'After' } as never);
    expect(sent).toEqual(['After']);
    await watch.close();
  });

  it('a row written between read-back mode reading it and swapping it is read again, and ends sent', async () => {
    // No watch of the store's own: the rollback is found and handled by the one below alone.
    store.watchSeq(undefined);
    const id = await newImport(3);
    const run = { token: 't6', lockKey: `${prefix}:subsync-rows:b6:lock` };
    await redis.set(run.lockKey, run.token);
    // Right after read-back mode reads the ledger, a live run hands row 2 on, writing the pending entry it read before.
    let written = false;
    const racing = new Proxy(redis, {
      get(target, name) {
        if (name === 'hscan') {
          return async (...args: Parameters<Redis['hscan']>) => {
            const items = await target.hscan(...args);
            if (!written && args[0] === store.keys.ledger(id)) {
              written = true;
              await store.updateUnsettledRows(id, [{ row: 2, entry: { ...pending, attempts: 1, handed: true } }], run);
            }
            return items;
          };
        }
        const value: unknown = Reflect.get(target, name, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    const { watch: racingWatch } = await openRollbackWatch({ redis: racing, store, prefix, dataDir, logger, timers: false });
    await redis.set(store.keys.seq, String(racingWatch.high() - 3));
    const found = await racingWatch.check('periodic check');
    expect(written).toBe(true);
    expect(found).toMatchObject({ imports: expect.arrayContaining([id]) });
    // Every row is sent, the one written meanwhile with what its run wrote: each reads back before any create.
    expect((await store.getRows(id, [1, 2, 3])).map((r) => r?.status)).toEqual(['sent', 'sent', 'sent']);
    expect(await store.getRow(id, 2)).toMatchObject({ attempts: 1, handed: true });
    await racingWatch.close();
  });

  it('a run writing back an entry it read before its row became sent leaves the row sent; the run whose mark it is may write it pending', async () => {
    store.watchSeq(undefined);
    const id = await newImport(1);
    const run = { token: 't4', lockKey: `${prefix}:subsync-rows:b4:lock` };
    await redis.set(run.lockKey, run.token);
    // Read-back mode made the row sent; a live run still holds the entry it read before, pending, and hands the row on.
    await store.updateUnsettled(id, 1, { ...pending, status: 'sent' });
    expect(await store.updateUnsettledRows(id, [{ row: 1, entry: { ...pending, attempts: 1, handed: true } }], run)).toEqual([true]);
    expect(await store.getRow(id, 1)).toMatchObject({ status: 'sent', attempts: 1, handed: true });
    // Its own mark, whose request proved not applied, goes back to pending.
    expect(await store.markSent(id, [{ row: 1, entry: { ...pending, attempts: 2 }, expect: 'sent' }], run)).toEqual(['marked']);
    expect(await store.updateUnsettledRows(id, [{ row: 1, entry: { ...pending, attempts: 2 } }], run)).toEqual([true]);
    expect((await store.getRow(id, 1))?.status).toBe('pending');
  });
});
