/**
 * The fleet's budget shared between imports and the export (BENCH_ONLY=share):
 * `subsync worker` processes against a spawned sandbox limited to RATE
 * requests/s, SUBSYNC_RATE = RATE, each scenario on a fresh key prefix.
 *
 * 1. the wait of a 5-row file imported 5 s after a big file, beside the same
 *    file's time alone (3 workers);
 * 2. the shares of two big files started 10 s apart, over the time both run
 *    (3 workers);
 * 3. a 100-row file meeting 5xx answers (retried rows) beside a big file
 *    queued 1 s after it: when it is done, against when the big one is half
 *    done (3 workers);
 * 4. an export of the sandbox's customers beside an import, with 6 workers,
 *    against the same export alone.
 *
 * A scenario stops once its figure is known (a big file is not imported to
 * its end). Sizes: BENCH_SHARE_RATE (50), BENCH_SHARE_BIG (3000),
 * BENCH_SHARE_CUSTOMERS (20000), BENCH_SHARE_EXPORT_IMPORT (6000).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { waitForExport } from '../src/export/wait.js';
import { createExportStore } from '../src/export/state.js';
import { enqueueExport } from '../src/export/job.js';
import { importFile } from '../src/import/producer.js';
import { importStatus } from '../src/import/status.js';
import { writeCustomersCsv } from './make-customers.js';
import { log, openBenchRuntime, spawnCli, spawnSandbox, waitFinished, type BenchRow, type BenchRuntime, type Spawned, type SpawnedSandbox } from './support.js';

const SandboxStatsSchema = z.object({ requests: z.number(), faults: z.object({ rateLimited: z.number(), error5xx: z.number() }) });

export interface ShareSizes {
  rate: number;
  big: number;
  customers: number;
  exportImport: number;
}

/** A sandbox limited to `rate`/s, a runtime on a fresh prefix, `workers` worker processes paced at `rate`. */
interface Fleet {
  sandbox: SpawnedSandbox;
  bench: BenchRuntime;
  workers: Spawned[];
  import(file: string): Promise<string>;
  stats(): Promise<z.infer<typeof SandboxStatsSchema>>;
  close(): Promise<void>;
}

async function openFleet(rate: number, workers: number, sandboxFlags: string[] = []): Promise<Fleet> {
  const sandbox = await spawnSandbox(['--rate-limit', String(rate), ...sandboxFlags]);
  const bench = await openBenchRuntime({ apiUrl: sandbox.url, rate });
  const env = { ...bench.env, SUBSYNC_API_URL: sandbox.url, SUBSYNC_RATE: String(rate), ...(process.env.SUBSYNC_EXPORT_SHARE ? { SUBSYNC_EXPORT_SHARE: process.env.SUBSYNC_EXPORT_SHARE } : {}) };
  const spawned = Array.from({ length: workers }, () => spawnCli(['worker'], env));
  // The workers' start is not part of any figure.
  await new Promise((r) => setTimeout(r, Number(process.env.BENCH_SHARE_START_MS ?? 5000)));
  return {
    sandbox,
    bench,
    workers: spawned,
    async import(file) {
      const result = await importFile({ file, kind: 'customers' }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger, redis: bench.runtime.redis });
      if (result.outcome !== 'enqueued') throw new Error(`${file} not enqueued: ${result.outcome}`);
      return result.importId;
    },
    async stats() {
      return SandboxStatsSchema.parse(await (await fetch(`${sandbox.url}/_sandbox/stats`)).json());
    },
    async close() {
      for (const w of spawned) w.child.kill('SIGTERM');
      await Promise.all(spawned.map((w) => w.exited));
      await bench.close();
      await sandbox.close();
    },
  };
}

const settledOf = async (fleet: Fleet, importId: string): Promise<number> => (await importStatus(fleet.bench.runtime.store, importId))?.settledRows ?? 0;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Seconds from `startedAt` until the import's results are written. */
async function secondsToFinish(fleet: Fleet, importId: string, startedAt: number, timeoutMs: number): Promise<number> {
  await waitFinished(fleet.bench.runtime, importId, timeoutMs);
  return (performance.now() - startedAt) / 1000;
}

async function smallBehindBig(dir: string, sizes: ShareSizes): Promise<BenchRow[]> {
  const small = path.join(dir, 'small.csv');
  const smallAlone = path.join(dir, 'small-alone.csv');
  const big = path.join(dir, 'big.csv');
  await writeCustomersCsv(small, 5, { uniqueTag: 'small' });
  await writeCustomersCsv(smallAlone, 5, { uniqueTag: 'alone' });
  await writeCustomersCsv(big, sizes.big, { uniqueTag: 'big' });
  const fleet = await openFleet(sizes.rate, 3);
  try {
    let t = performance.now();
    const alone = await secondsToFinish(fleet, await fleet.import(smallAlone), t, 60_000);
    await fleet.import(big);
    await sleep(5000);
    t = performance.now();
    const behind = await secondsToFinish(fleet, await fleet.import(small), t, 15 * 60_000);
    const { rateLimited } = (await fleet.stats()).faults;
    log(`5-row file: ${alone.toFixed(1)} s alone, ${behind.toFixed(1)} s imported 5 s after ${sizes.big} rows; ${rateLimited} × 429`);
    return [
      { figure: `share 1. A 5-row file imported 5 s after a ${sizes.big.toLocaleString('en')}-row file, ${sizes.rate}/s, 3 workers: import to results (s)`, subsync: behind, baseline: alone, baselineLabel: 'the same file alone (s)', note: `target ≤ 10 s; 429s: ${rateLimited}` },
    ];
  } finally {
    await fleet.close();
  }
}

async function twoBig(dir: string, sizes: ShareSizes): Promise<BenchRow[]> {
  const first = path.join(dir, 'first.csv');
  const second = path.join(dir, 'second.csv');
  await writeCustomersCsv(first, sizes.big, { uniqueTag: 'first' });
  await writeCustomersCsv(second, sizes.big, { uniqueTag: 'second' });
  const fleet = await openFleet(sizes.rate, 3);
  try {
    const a = await fleet.import(first);
    await sleep(10_000);
    const b = await fleet.import(second);
    // Both run from here: what each settles over the next 20 s (or until the first is done).
    await sleep(2000);
    const [a0, b0] = [await settledOf(fleet, a), await settledOf(fleet, b)];
    const t0 = performance.now();
    let a1 = a0;
    let b1 = b0;
    while (performance.now() - t0 < 20_000 && a1 < sizes.big) {
      await sleep(500);
      [a1, b1] = [await settledOf(fleet, a), await settledOf(fleet, b)];
    }
    const seconds = (performance.now() - t0) / 1000;
    const total = Math.max(1, a1 - a0 + (b1 - b0));
    const shareA = (a1 - a0) / total;
    const shareB = (b1 - b0) / total;
    const { rateLimited } = (await fleet.stats()).faults;
    log(`two big files: first ${(100 * shareA).toFixed(0)}%, second ${(100 * shareB).toFixed(0)}% over ${seconds.toFixed(0)} s (${(total / seconds).toFixed(1)} rows/s); ${rateLimited} × 429`);
    return [
      { figure: `share 2. Two ${sizes.big.toLocaleString('en')}-row files started 10 s apart, ${sizes.rate}/s, 3 workers: the second's share of rows settled while both run`, subsync: shareB, baseline: 0.5, baselineLabel: 'an even share', note: `target 0.4–0.6 each; first ${shareA.toFixed(2)}; ${(total / seconds).toFixed(1)} rows/s together over ${seconds.toFixed(0)} s; 429s: ${rateLimited}` },
    ];
  } finally {
    await fleet.close();
  }
}

async function retriesBesideBig(dir: string, sizes: ShareSizes): Promise<BenchRow[]> {
  const retried = path.join(dir, 'retried.csv');
  const big = path.join(dir, 'big-after.csv');
  await writeCustomersCsv(retried, 100, { uniqueTag: 'retried' });
  await writeCustomersCsv(big, sizes.big, { uniqueTag: 'bigafter' });
  // 5xx on 5% of requests (before anything is applied): the 100-row file meets a few.
  const fleet = await openFleet(sizes.rate, 3, ['--error-rate', '0.05']);
  try {
    const t = performance.now();
    const small = await fleet.import(retried);
    await sleep(1000);
    const bigId = await fleet.import(big);
    let smallDone: number | undefined;
    let bigHalf: number | undefined;
    const deadline = Date.now() + 15 * 60_000;
    while ((smallDone === undefined || bigHalf === undefined) && Date.now() < deadline) {
      await sleep(200);
      const s = await importStatus(fleet.bench.runtime.store, small);
      if (smallDone === undefined && s?.finished) smallDone = (performance.now() - t) / 1000;
      if (bigHalf === undefined && (await settledOf(fleet, bigId)) >= sizes.big / 2) bigHalf = (performance.now() - t) / 1000;
    }
    const retries = (await importStatus(fleet.bench.runtime.store, small))?.retries ?? 0;
    const { rateLimited } = (await fleet.stats()).faults;
    log(`100 rows with ${retries} retries: done at ${smallDone?.toFixed(1)} s; the big file half done at ${bigHalf?.toFixed(1)} s; ${rateLimited} × 429`);
    return [
      { figure: `share 3. A 100-row file meeting 5xx (5%) beside a ${sizes.big.toLocaleString('en')}-row file queued 1 s later, ${sizes.rate}/s, 3 workers: done at (s)`, subsync: smallDone ?? 'not done', baseline: bigHalf ?? 'not reached', baselineLabel: 'the big file half done at (s)', note: `target: ratio < 1; ${retries} retries in the small file; 429s: ${rateLimited}` },
    ];
  } finally {
    await fleet.close();
  }
}

async function exportBeside(dir: string, sizes: ShareSizes): Promise<BenchRow[]> {
  const file = path.join(dir, 'beside-export.csv');
  await writeCustomersCsv(file, sizes.exportImport, { uniqueTag: 'besideexport' });
  const fleet = await openFleet(sizes.rate, 6, ['--seed-customers', String(sizes.customers)]);
  try {
    const exportOnce = async (): Promise<{ seconds: number; complete: boolean | undefined; count: number | undefined }> => {
      const t = Date.now();
      const id = await enqueueExport(fleet.bench.runtime.queues.control, { format: 'csv', gzip: false });
      const record = await waitForExport(createExportStore(fleet.bench.runtime.redis, fleet.bench.runtime.config.queuePrefix), fleet.bench.runtime.queues, id, { pollMs: 50 });
      return { seconds: ((record.finishedAt ?? Date.now()) - t) / 1000, complete: record.complete, count: record.count };
    };
    const alone = await exportOnce();
    await fleet.import(file);
    await sleep(3000);
    const beside = await exportOnce();
    const { rateLimited } = (await fleet.stats()).faults;
    log(`export: ${alone.seconds.toFixed(1)} s alone (${alone.count}), ${beside.seconds.toFixed(1)} s beside the import (${beside.count}, complete ${beside.complete}); ${rateLimited} × 429`);
    return [
      { figure: `share 4. Export of ${sizes.customers.toLocaleString('en')} customers beside a ${sizes.exportImport.toLocaleString('en')}-row import, ${sizes.rate}/s, 6 workers, SUBSYNC_EXPORT_SHARE ${process.env.SUBSYNC_EXPORT_SHARE ?? '0.4'} (s)`, subsync: beside.seconds, baseline: alone.seconds, baselineLabel: 'the same export alone (s)', note: `target ratio ≤ 2.5; complete: ${beside.complete} (${beside.count} rows); 429s: ${rateLimited}` },
    ];
  } finally {
    await fleet.close();
  }
}

export async function shareBench(sizes: ShareSizes): Promise<BenchRow[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-share-'));
  const only = process.env.BENCH_SHARE_ONLY?.split(',').map(Number);
  const want = (n: number): boolean => !only || only.includes(n);
  const rows: BenchRow[] = [];
  try {
    if (want(1)) rows.push(...(await smallBehindBig(dir, sizes)));
    if (want(2)) rows.push(...(await twoBig(dir, sizes)));
    if (want(3)) rows.push(...(await retriesBesideBig(dir, sizes)));
    if (want(4)) rows.push(...(await exportBeside(dir, sizes)));
    return rows;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
