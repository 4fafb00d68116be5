import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { enqueueExport } from '../../src/export/job.js';
import { createExportStore } from '../../src/export/state.js';
import { SEARCH_PAGE_SIZE } from '../../src/policy.js';
import { SandboxRefusal } from '../../src/sandbox/store.js';
import { killAll, subsync, waitForOutput } from '../support/cli.js';
import { cliEnv, createCustomers, expectedCsvRow, expectedJson, logSearches, readCsvRows, readManifest, waitForDone } from '../support/exports.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
let outDir: string | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
  if (outDir) await rm(outDir, { recursive: true, force: true });
  outDir = undefined;
});

const line = (text: string, label: string): string => new RegExp(`^${label}: (.+)$`, 'm').exec(text)?.[1] ?? '';

describe('subsync export', () => {
  it('--wait exits 0 for an export beside an import that creates customers all along: every customer of the start once, the rest counted as drift', async () => {
    pipeline = await startPipeline();
    createCustomers(pipeline.sandbox.store, 1_234);
    const store = pipeline.sandbox.store;
    let n = 0;
    // Every search request of the export's rounds finds a page of new customers first: the count never holds still.
    const log = logSearches(pipeline.sandbox, () => createCustomers(store, SEARCH_PAGE_SIZE, `Growing${n++}`));
    const run = subsync(['export', '--wait', '--format', 'jsonl'], cliEnv(pipeline));
    expect((await run.exited).code).toBe(0);
    expect(run.stdout()).not.toContain('not proven complete');
    const manifest = await readManifest(line(run.stdout(), 'manifest'));
    const atStart = manifest.totalItemCount.atStart ?? 0;
    expect(manifest.complete).toBe(true);
    expect(manifest.totalItemCount.atEnd).toBeGreaterThan(atStart);
    const ids = (await readFile(line(run.stdout(), 'file'), 'utf8')).trimEnd().split('\n').map((l) => String((JSON.parse(l) as { CustomerID: string }).CustomerID));
    expect(new Set(ids).size).toBe(ids.length);
    const written = new Set(ids);
    expect(store.customers().slice(0, atStart).filter((c) => !written.has(c.CustomerID))).toEqual([]);
    expect(Number(line(run.stdout(), 'customers'))).toBe(ids.length);
    expect(manifest.drift?.added).toBe(ids.length - atStart);
    // The rounds ran out with the count still moving (the export did not end on a quiet service).
    expect(manifest.drift?.rounds).toBe(5);
    expect(manifest.drift?.reasons.join(' ')).toContain(`every customer present at the start (${atStart}) was read, once`);
    expect(log.seen.length).toBeGreaterThan(Math.ceil(atStart / SEARCH_PAGE_SIZE) + 1);
  });

  it('--wait prints the file and manifest; the rows are the service\'s customers and the sha256 is the file\'s', async () => {
    pipeline = await startPipeline();
    createCustomers(pipeline.sandbox.store, 1_234);
    const run = subsync(['export', '--wait'], cliEnv(pipeline));
    expect((await run.exited).code).toBe(0);
    expect(run.stdout()).toMatch(/^export id: export-\d{8}T\d{6}Z-[0-9a-f]{6}$/m);
    const file = line(run.stdout(), 'file');
    const manifestPath = line(run.stdout(), 'manifest');
    expect(line(run.stdout(), 'customers')).toBe('1239');
    expect(file.startsWith(path.join(pipeline.dataDir, 'exports', 'customers-'))).toBe(true);
    expect(manifestPath).toBe(file.replace(/\.csv$/, '.manifest.json'));
    expect((await readCsvRows(file)).slice(1)).toEqual(pipeline.sandbox.store.customers().map(expectedCsvRow));
    const manifest = await readManifest(manifestPath);
    expect(manifest.sha256).toBe(createHash('sha256').update(await readFile(file)).digest('hex'));
    expect(manifest).toMatchObject({ count: 1_239, complete: true });
    // Progress went to stderr (not a TTY here: plain lines).
    expect(run.stderr()).toMatch(/progress: \d+\/\d+ pages {2}\d+ rows\/s {2}ETA/);
  });

  it('--format jsonl --gzip --out DIR --keep 1 writes there and keeps only the newest export; a bad flag is a usage error', async () => {
    pipeline = await startPipeline();
    createCustomers(pipeline.sandbox.store, 150);
    outDir = await mkdtemp(path.join(os.tmpdir(), 'subsync-export-out-'));
    const args = ['export', '--format', 'jsonl', '--gzip', '--out', outDir, '--keep', '1', '--wait', '--json'];
    const first = subsync(args, cliEnv(pipeline));
    expect((await first.exited).code).toBe(0);
    const objects = first.stdout().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    const file = String(objects.find((o) => 'file' in o)?.file);
    expect(path.dirname(file)).toBe(outDir);
    expect(file).toMatch(/\.jsonl\.gz$/);
    const lines = gunzipSync(await readFile(file)).toString('utf8').trimEnd().split('\n');
    expect(lines.map((l) => JSON.parse(l) as unknown)).toEqual(pipeline.sandbox.store.customers().map(expectedJson));

    // The second run prunes the first (in the same second, its name carries its id and still counts as newer).
    const second = subsync(args, cliEnv(pipeline));
    expect((await second.exited).code).toBe(0);
    const kept = await readdir(outDir);
    expect(kept).toHaveLength(2);
    const secondFile = String(second.stdout().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).find((o) => 'file' in o)?.file);
    expect(kept.sort()).toEqual([path.basename(secondFile), path.basename(secondFile).replace(/\.jsonl\.gz$/, '.manifest.json')].sort());
    expect((await readManifest(path.join(outDir, kept.find((n) => n.endsWith('.manifest.json')) ?? ''))).pruned).toHaveLength(2);

    const bad = subsync(['export', '--format', 'xml'], cliEnv(pipeline));
    expect((await bad.exited).code).toBe(64);
    expect(bad.stderr()).toContain('expected csv or jsonl');
  });

  it('--wait exits 1 naming the reason when the export fails for good (a refusal is not retried)', async () => {
    pipeline = await startPipeline();
    let searches = 0;
    logSearches(pipeline.sandbox, () => {
      searches++;
      throw new SandboxRefusal(401, 'Not authorised');
    });
    const run = subsync(['export', '--wait'], cliEnv(pipeline));
    expect((await run.exited).code).toBe(1);
    expect(run.stderr()).toMatch(/subsync: export export-\S+ failed: Not authorised \(API_UNAUTHORIZED 401\)/);
    expect(run.stderr()).not.toContain('    at ');
    expect(searches).toBe(1);
  });

  it('an export whose worker is killed resumes in the next worker without reading its finished pages again', async () => {
    pipeline = await startPipeline({ workers: false });
    createCustomers(pipeline.sandbox.store, 3_000);
    const sandbox = pipeline.sandbox;
    // After the twelfth search request the service turns slow, so the worker is
    // killed with some pages finished and some in flight.
    const log = logSearches(sandbox, (_seen, all) => {
      if (all.length === 12) sandbox.setFaults({ latencyMs: 3_000 });
    });
    const store = createExportStore(pipeline.runtime.redis, pipeline.prefix);
    const exportId = await enqueueExport(pipeline.runtime.queues.control, { format: 'csv', gzip: false });

    const first = subsync(['worker'], cliEnv(pipeline));
    await waitForOutput(first, /worker running/);
    await until(async () => ((await store.get(exportId))?.pagesDone ?? 0) >= 10 || undefined, 'ten pages to finish', 20_000, 5);
    first.child.kill('SIGKILL');
    await first.exited;
    const finished = Object.keys(await pipeline.runtime.redis.hgetall(store.keys.pages(exportId))).map((key) => Number(key.split(':')[1]));
    expect(finished.length).toBeGreaterThanOrEqual(10);
    expect((await store.get(exportId))?.status).toBe('running');

    // BullMQ hands a dead worker's job back once its lock expires (30 s) and a
    // stalled check sees it; the test does the same hand-back at once.
    sandbox.setFaults({ latencyMs: 0 });
    log.setPhase('second');
    const job = await pipeline.runtime.queues.control.getJob(exportId);
    expect(await job?.getState()).toBe('active');
    await job?.moveToWait();

    const second = subsync(['worker'], cliEnv(pipeline));
    const { record, manifest } = await waitForDone(pipeline, exportId, 30_000);
    const lastPage = Math.ceil(sandbox.store.customers().length / SEARCH_PAGE_SIZE) - 1;
    // Requests the first worker had in flight when it died still arrive late, under the new phase: they are for unfinished pages.
    const again = log.seen.filter((s) => s.phase === 'second' && finished.includes(s.skip / SEARCH_PAGE_SIZE) && s.skip / SEARCH_PAGE_SIZE !== lastPage);
    expect(again).toEqual([]);
    expect((await readCsvRows(record.file ?? '')).slice(1)).toEqual(sandbox.store.customers().map(expectedCsvRow));
    expect(manifest).toMatchObject({ complete: true, runs: 2, count: 3_005, duplicatesDropped: 0 });
    expect(manifest.pages.resumed).toBe(finished.length);
    second.child.kill('SIGTERM');
    await second.exited;
  }, 60_000);
});
