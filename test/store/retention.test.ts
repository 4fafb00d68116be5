/**
 * Ledger retention: a finished import's record, ledger and counts expire
 * after SUBSYNC_RETENTION_DAYS, an unfinished one never does, a retry takes
 * the expiry off again; `status` shows when an import expires and its
 * memory in Redis, and a missing import is one line.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { importFile } from '../../src/import/producer.js';
import { startWorkers } from '../../src/runtime.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { waitFinished } from '../support/imports.js';
import { envOf, startPipeline, until, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

const DAY_MS = 24 * 3600 * 1000;

describe('ledger retention', () => {
  it('sets TTLs on a finished import only, reports them, and a retry takes them off', async () => {
    pipeline = await startPipeline({ workers: false, seed: false, config: { retentionDays: 2 } });
    const { store, queues, keyring, logger, redis } = pipeline.runtime;
    const result = await importFile({ file: await pipeline.file('kept.csv', 'FirstName,LastName\nAna,Kept\nBen,Kept\n') }, { store, queues, keyring, logger });
    const id = result.importId;
    const keys = [store.keys.importRecord(id), store.keys.ledger(id), store.keys.counts(id)];
    // Unfinished (nothing ran yet): nothing expires (no counts yet: nothing settled).
    for (const key of keys.slice(0, 2)) expect(await redis.pttl(key)).toBe(-1);
    expect((await store.footprint(id)).expiresAt).toBeUndefined();

    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    await waitFinished(pipeline, id);
    for (const key of keys) {
      const ttl = await redis.pttl(key);
      expect(ttl).toBeGreaterThan(2 * DAY_MS - 60_000);
      expect(ttl).toBeLessThanOrEqual(2 * DAY_MS);
    }
    const footprint = await store.footprint(id);
    expect(footprint.bytes).toBeGreaterThan(0);
    expect(footprint.expiresAt).toBeGreaterThan(Date.now() + 2 * DAY_MS - 60_000);

    const status = subsync(['status', id], envOf(pipeline));
    expect((await status.exited).code).toBe(0);
    expect(status.stdout()).toMatch(new RegExp(`${id} .* settled .* expires ${new Date(footprint.expiresAt ?? 0).toISOString().slice(0, 13)}.*, [\\d.]+ (B|KB) in Redis`));

    // Reopened for a retry: unfinished again, so kept.
    const entry = await store.getRow(id, 1);
    await store.reopenRow(id, 1, { ...entry!, status: 'pending', handed: true });
    for (const key of keys) expect(await redis.pttl(key)).toBe(-1);
  });

  it('an expired import leaves the list of imports at the next sweep', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues, keyring, logger, redis } = pipeline.runtime;
    const result = await importFile({ file: await pipeline.file('gone.csv', 'FirstName,LastName\nAna,Gone\n') }, { store, queues, keyring, logger });
    pipeline.workers = startWorkers(pipeline.runtime, { apiUrl: pipeline.sandbox.url, concurrency: 2 });
    await waitFinished(pipeline, result.importId);
    expect(await store.listImportIds()).toEqual([result.importId]);
    // Its retention over.
    for (const key of [store.keys.importRecord(result.importId), store.keys.ledger(result.importId), store.keys.counts(result.importId)]) await redis.pexpire(key, 1);
    await until(async () => ((await redis.exists(store.keys.importRecord(result.importId))) === 0 ? true : undefined), 'the record to expire');
    await pipeline.workers.sweeper.runOnce();
    expect(await store.listImportIds()).toEqual([]);
  });

  it('status of an import Redis does not hold is one line, exit 66', async () => {
    pipeline = await startPipeline({ workers: false });
    const run = subsync(['status', 'feedfacefeedfacefeedface'], envOf(pipeline));
    expect((await run.exited).code).toBe(EXIT_CODES.notFound);
    expect(run.stderr().trim().split('\n').filter((l) => l.startsWith('subsync:'))).toEqual([
      'subsync: no import feedfacefeedfacefeedface in Redis (a finished import\'s data expires after SUBSYNC_RETENTION_DAYS; `subsync status` lists the imports it holds)',
    ]);
    expect(run.stderr()).not.toContain('    at ');
  });
});
