import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'bullmq';
import { describe, expect, it, afterEach } from 'vitest';
import { createFeeder, feedKeys, importSchedule, pushBacklog } from '../../src/queue/feeder.js';
import { BATCH_PRIORITY, ROWS_QUEUE, batchJobId, type RowBatchData } from '../../src/queue/queues.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';
import type { Runtime } from '../../src/runtime.js';

// The feeder on real Redis and BullMQ, driven pass by pass (no worker runs the jobs it queues).
let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

/** A feeder of one slot and no rate; `rowsAhead` fixes the rows it keeps in flight, else they follow what it measures. */
function feederOf(runtime: Runtime, rowsAhead?: number) {
  return createFeeder(
    { redis: runtime.redis, prefix: runtime.config.queuePrefix, queues: runtime.queues, store: runtime.store, logger: runtime.logger, rate: undefined, exportShare: 0.4, concurrency: 1 },
    { rowsAhead },
  );
}

const batch = (importId: string, block: number): { block: number; data: RowBatchData } => ({ block, data: { importId, rows: Array.from({ length: 25 }, (_, i) => block * 25 + i + 1) } });

describe('the feeder', () => {
  it('releases the imports of the turn round-robin by weight, only as much as there is room for', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { redis, queues } = pipeline.runtime;
    await pushBacklog(redis, pipeline.prefix, 'big', Array.from({ length: 8 }, (_, b) => batch('big', b)), 'normal', 1);
    await pushBacklog(redis, pipeline.prefix, 'urgent', Array.from({ length: 8 }, (_, b) => batch('urgent', b)), 'high', 2);
    await pushBacklog(redis, pipeline.prefix, 'later', Array.from({ length: 8 }, (_, b) => batch('later', b)), 'low', 3);
    // A second push of the same batches (a resumed enqueue) adds nothing.
    expect(await pushBacklog(redis, pipeline.prefix, 'big', [batch('big', 0)], 'normal', 1)).toBe(0);
    expect(await importSchedule(redis, pipeline.prefix, 'urgent')).toMatchObject({ place: 2, sharing: 3, weightShare: 4 / 7, backlogRows: 200 });

    // Room for 7 batches: one turn, 2 of the normal import, 4 of the high one, 1 of the low one.
    const feeder = feederOf(pipeline.runtime, 7 * 25);
    expect(await feeder.runOnce()).toBe(7);
    const queued = await queues.rows.getPrioritized(0, -1);
    const by = (id: string): number => queued.filter((job) => job.data.importId === id).length;
    expect([by('big'), by('urgent'), by('later')]).toEqual([2, 4, 1]);
    expect(queued.every((job) => job.opts.priority === BATCH_PRIORITY)).toBe(true);
    // Full: nothing more until jobs leave the queue.
    expect(await feeder.runOnce()).toBe(0);
    await feeder.close();
  });

  it('counts every batch workers hold against the room, however many', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { redis, queues } = pipeline.runtime;
    await pushBacklog(redis, pipeline.prefix, 'big', Array.from({ length: 10 }, (_, b) => batch('big', b)), 'normal', 1);
    const feeder = feederOf(pipeline.runtime, 5 * 25);
    expect(await feeder.runOnce()).toBe(5);
    // Workers take four of the five (taken by hand: nothing runs them), so one waits and four are active.
    const taker = new Worker(ROWS_QUEUE, null, { connection: redis.duplicate(), prefix: queues.prefix, autorun: false });
    for (let i = 0; i < 4; i++) expect(await taker.getNextJob(`taker-${i}`)).toBeDefined();
    expect(await queues.rows.getActiveCount()).toBe(4);
    // Five batches in flight fill the room: nothing more is released.
    expect(await feeder.runOnce()).toBe(0);
    await taker.close();
    await feeder.close();
  });

  it('with no rate to pace by, keeps 8 rows a slot in flight until it has measured what the imports settle, then about half a second of that', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { redis, queues, store } = pipeline.runtime;
    await store.createImport({ id: 'imp', file: 'f.csv', kind: 'customers', headers: ['FirstName'], paths: ['FirstName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueued', round: 0 });
    await pushBacklog(redis, pipeline.prefix, 'imp', Array.from({ length: 40 }, (_, b) => batch('imp', b)), 'normal', 1);
    const feeder = feederOf(pipeline.runtime);
    // One slot, nothing measured yet: room for 8 rows, one batch.
    expect(await feeder.runOnce()).toBe(1);
    // The import settles 1,000 rows over the next second; the pass after that measures it.
    await redis.hincrby(store.keys.counts('imp'), 'settled', 1_000);
    await sleep(1_050);
    expect(await feeder.runOnce()).toBe(0);
    // The rate it measured (1,000 rows over the time between its passes) is about 1,000 rows/s at most:
    // half a second of it in flight, where 25 rows are, so the next pass releases batches up to that.
    const measured = (await importSchedule(redis, pipeline.prefix, 'imp')).rowsPerSecond ?? 0;
    expect(measured).toBeGreaterThan(250);
    expect(measured).toBeLessThanOrEqual(1_000);
    const released = await feeder.runOnce();
    const expected = Math.ceil((Math.ceil(measured / 2) - 25) / 25);
    expect(Math.abs(released - expected)).toBeLessThanOrEqual(1);
    expect(released).toBeGreaterThan(4);
    expect(await queues.rows.getJobCounts('prioritized')).toMatchObject({ prioritized: 1 + released });
    await feeder.close();
  });

  it('a paused import keeps its place and releases nothing until resumed; a cancelled one leaves the turn', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { redis, queues, store } = pipeline.runtime;
    await pushBacklog(redis, pipeline.prefix, 'held', [batch('held', 0), batch('held', 1)], 'normal', 1);
    await pushBacklog(redis, pipeline.prefix, 'free', [batch('free', 0)], 'normal', 2);
    await pushBacklog(redis, pipeline.prefix, 'gone', [batch('gone', 0)], 'normal', 3);
    await redis.hset(store.keys.runState('held'), 'state', 'paused');
    await redis.hset(store.keys.runState('gone'), 'state', 'cancelled');
    const feeder = feederOf(pipeline.runtime, 1_000);
    expect(await feeder.runOnce()).toBe(1);
    expect((await queues.rows.getPrioritized(0, -1)).map((job) => job.data.importId)).toEqual(['free']);
    expect(await importSchedule(redis, pipeline.prefix, 'held')).toMatchObject({ place: 1, sharing: 1, backlogRows: 50 });
    expect(await importSchedule(redis, pipeline.prefix, 'gone')).toMatchObject({ place: undefined, backlogRows: 0 });
    await redis.hset(store.keys.runState('held'), 'state', 'running');
    expect(await feeder.runOnce()).toBe(2);
    await feeder.close();
  });

  it('a batch a dead feeder took from the backlog but did not queue is queued by the next one, once', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { redis, queues } = pipeline.runtime;
    const keys = feedKeys(pipeline.prefix);
    await pushBacklog(redis, pipeline.prefix, 'imp', [batch('imp', 0), batch('imp', 1)]);
    // What a feeder killed between its take and its add leaves: block 0 out of the backlog, in `releasing`, and its lock.
    const taken = await redis.hget(keys.batches('imp'), '0');
    await redis.multi().hdel(keys.batches('imp'), '0').zrem(keys.backlog('imp'), '0').sadd(keys.releasedBlocks('imp'), '0').hset(keys.releasing, 'imp:0', taken ?? '').set(keys.lock, 'dead-feeder', 'PX', 300).exec();
    // And one killed after its add: block 1 queued, and still in `releasing`.
    const one = await redis.hget(keys.batches('imp'), '1');
    await redis.multi().hdel(keys.batches('imp'), '1').zrem(keys.backlog('imp'), '1').zrem(keys.turn, 'imp').hset(keys.releasing, 'imp:1', one ?? '').exec();
    await queues.rows.add('rows.batch', JSON.parse(one ?? '{}') as RowBatchData, { jobId: batchJobId('imp', 1), priority: BATCH_PRIORITY });

    const next = feederOf(pipeline.runtime, 1_000);
    // The dead feeder's lock holds until it expires; then the next one takes it over and recovers.
    expect(await next.runOnce()).toBe(0);
    expect(next.holdsLock()).toBe(false);
    await until(async () => {
      await next.runOnce();
      return next.holdsLock() ? true : undefined;
    }, "the dead feeder's lock to expire", 5_000);
    const jobs = await queues.rows.getPrioritized(0, -1);
    expect(jobs.map((job) => job.id).sort()).toEqual([batchJobId('imp', 0), batchJobId('imp', 1)]);
    expect(await redis.hlen(keys.releasing)).toBe(0);
    await next.close();
  });

  it("a batch its own pass left between backlog and queue is queued by its next pass, the lock never changing hands", async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { redis, queues } = pipeline.runtime;
    const keys = feedKeys(pipeline.prefix);
    await pushBacklog(redis, pipeline.prefix, 'imp', [batch('imp', 0), batch('imp', 1)]);
    const feeder = feederOf(pipeline.runtime, 25);
    expect(await feeder.runOnce()).toBe(1);
    expect(feeder.holdsLock()).toBe(true);
    // What a Redis that lost its last writes comes back with: the pass's take of block 0 kept, its add and
    // the drop from `releasing` lost (or an add that failed on a cut connection).
    const job = await queues.rows.getJob(batchJobId('imp', 0));
    await job?.remove();
    await redis.hset(keys.releasing, 'imp:0', JSON.stringify(batch('imp', 0).data));

    // The lock is this feeder's still (renewed, not taken): its next pass queues block 0 again.
    await feeder.runOnce();
    expect(feeder.holdsLock()).toBe(true);
    expect((await queues.rows.getPrioritized(0, -1)).map((j) => j.id)).toContain(batchJobId('imp', 0));
    expect(await redis.hlen(keys.releasing)).toBe(0);
    await feeder.close();
  });
});
