/**
 * Not part of `npm run bench`: where the CPU of an import goes, by process.
 * One import of ROWS customers laid out as the bench runs it (the sandbox and
 * one `subsync worker --concurrency C` in their own processes, the producer
 * in this one), then each process's CPU time per row: the worker's and the
 * sandbox's from /proc (utime + stime), Redis's from INFO cpu, the
 * producer's from process.cpuUsage. No profiler attached.
 *
 *   node dist/bench/cpuImport.js [ROWS=20000] [C=32]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { importFile } from '../src/import/producer.js';
import { writeCustomersCsv } from './make-customers.js';
import { REDIS_URL, openBenchRuntime, processCpuMs, redisCpuMs, spawnCli, spawnSandbox, waitFinished, waitForLine } from './support.js';

const rows = Number(process.argv[2] ?? 20_000);
const concurrency = Number(process.argv[3] ?? 32);

const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-cpu-'));
const file = path.join(dir, 'customers.csv');
await writeCustomersCsv(file, rows);
const redis = new Redis(REDIS_URL);
const sandbox = await spawnSandbox();
const bench = await openBenchRuntime({ apiUrl: sandbox.url });
const worker = spawnCli(['worker', '--concurrency', String(concurrency)], { ...bench.env, SUBSYNC_API_URL: sandbox.url });
try {
  await waitForLine(worker, /worker running/, 20_000);
  const before = { worker: await processCpuMs(worker.child.pid), sandbox: await processCpuMs(sandbox.pid), redis: await redisCpuMs(redis), producer: process.cpuUsage() };
  const started = performance.now();
  const result = await importFile({ file, kind: 'customers' }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger });
  if (result.outcome !== 'enqueued') throw new Error(result.outcome);
  const enqueued = performance.now();
  await waitFinished(bench.runtime, result.importId, 600_000);
  const seconds = (performance.now() - started) / 1000;
  const producer = process.cpuUsage(before.producer);
  const used: Record<string, number> = {
    'subsync worker': (await processCpuMs(worker.child.pid)) - before.worker,
    'producer (this process, incl. waiting)': (producer.user + producer.system) / 1000,
    redis: (await redisCpuMs(redis)) - before.redis,
    sandbox: (await processCpuMs(sandbox.pid)) - before.sandbox,
  };
  console.log(`${rows} rows at concurrency ${concurrency}: ${(rows / seconds).toFixed(0)} rows/s, ${seconds.toFixed(1)} s (enqueued in ${((enqueued - started) / 1000).toFixed(1)} s)`);
  const total = Object.values(used).reduce((a, b) => a + b, 0);
  for (const [name, ms] of Object.entries(used)) console.log(`${name}: ${ms.toFixed(0)} ms CPU, ${((1000 * ms) / rows).toFixed(0)} µs per row`);
  console.log(`all: ${((1000 * total) / rows).toFixed(0)} µs per row, ${(total / 1000 / seconds).toFixed(2)} cores on average`);
} finally {
  worker.child.kill('SIGTERM');
  await worker.exited;
  await bench.close();
  await sandbox.close();
  await redis.quit();
  await rm(dir, { recursive: true, force: true });
}
