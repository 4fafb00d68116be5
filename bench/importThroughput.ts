/**
 * Row 1: import throughput end to end (importFile through results written),
 * beside a raw undici loop sending the same creates at the same concurrency.
 * Each side runs as in production: the sandbox in its own process (the
 * service), one `subsync worker --concurrency N` process, the producer here
 * (as `subsync import` would); the raw loop runs here against its own fresh
 * sandbox process. Row 5 (latency) runs the same way.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { importFile } from '../src/import/producer.js';
import { customerRows, writeCustomersCsv, COLUMNS } from './make-customers.js';
import { log, openBenchRuntime, runConcurrent, spawnCli, spawnSandbox, waitFinished, waitForLine, type BenchRow } from './support.js';

/** The create bodies raw undici sends: the same rows as the file, every member the interface shows. */
/** The create bodies of the customers `writeCustomersCsv(file, rows, { uniqueTag })` writes. */
export function createBodies(rows: number, uniqueTag?: string): string[] {
  const bodies: string[] = [];
  for (const cells of customerRows(rows, uniqueTag)) {
    const c = Object.fromEntries(COLUMNS.map((name, i) => [name, cells[i] ?? '']));
    bodies.push(JSON.stringify({
      FirstName: c.FirstName, MiddleName: '', LastName: c.LastName, NamePrefix: '', NameSuffix: '', Title: '', Company: '',
      EmailAddress: c.EmailAddress, Password: '', AddressLine1: c.AddressLine1, AddressLine2: c.AddressLine2, City: c.City,
      StateProvince: c.StateProvince, PostalCode: c.PostalCode, CountryCode: c.CountryCode, HomeNumber: '',
      MobileNumber: c.MobileNumber === '' ? null : c.MobileNumber, WorkNumber: '', FAXNumber: '', WebPageURL: '',
    }));
  }
  return bodies;
}

export async function rawCreates(url: string, bodies: string[], concurrency: number): Promise<number> {
  const pool = new Pool(url, { connections: 128, pipelining: 1 });
  try {
    const seconds = await runConcurrent(bodies.length, concurrency, async (i) => {
      const response = await pool.request({ method: 'POST', path: '/json/customers', headers: { 'content-type': 'application/json' }, body: bodies[i] });
      await response.body.json();
    });
    return bodies.length / seconds;
  } finally {
    await pool.close();
  }
}

/** One import of `file` through one worker process; rows/s from importFile's start to `finished`. */
export async function subsyncImport(file: string, rows: number, concurrency: number, faults: { latencyMs?: number } = {}): Promise<{ rowsPerSecond: number; seconds: number }> {
  const sandbox = await spawnSandbox(faults.latencyMs ? ['--latency', String(faults.latencyMs)] : []);
  const bench = await openBenchRuntime({ apiUrl: sandbox.url });
  const worker = spawnCli(['worker', '--concurrency', String(concurrency)], { ...bench.env, SUBSYNC_API_URL: sandbox.url });
  try {
    await waitForLine(worker, /worker running/, 20_000);
    const started = performance.now();
    const result = await importFile({ file, kind: 'customers' }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger });
    if (result.outcome !== 'enqueued') throw new Error(`import not enqueued: ${result.outcome}`);
    const status = await waitFinished(bench.runtime, result.importId, 10 * 60_000);
    const seconds = (performance.now() - started) / 1000;
    if (status.succeeded !== rows) log(`warning: ${status.succeeded} of ${rows} rows succeeded: ${JSON.stringify(status.counts)}`);
    return { rowsPerSecond: rows / seconds, seconds };
  } finally {
    worker.child.kill('SIGTERM');
    await worker.exited;
    await bench.close();
    await sandbox.close();
  }
}

export async function importThroughput(rows: number, concurrencies: number[]): Promise<BenchRow[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-import-'));
  try {
    const file = path.join(dir, 'customers.csv');
    await writeCustomersCsv(file, rows);
    const bodies = createBodies(rows);
    const out: BenchRow[] = [];
    for (const concurrency of concurrencies) {
      const sandbox = await spawnSandbox();
      const raw = await rawCreates(sandbox.url, bodies, concurrency).finally(() => sandbox.close());
      const sub = await subsyncImport(file, rows, concurrency);
      log(`import ${rows} rows at concurrency ${concurrency}: ${sub.rowsPerSecond.toFixed(0)} rows/s (${sub.seconds.toFixed(1)} s), raw ${raw.toFixed(0)} req/s`);
      out.push({
        figure: `1. Import ${rows.toLocaleString('en')} customer rows end to end, one worker process, concurrency ${concurrency} (rows/s)`,
        subsync: sub.rowsPerSecond,
        baseline: raw,
        baselineLabel: 'raw undici creates, same concurrency (req/s)',
        note: `${rows === 20_000 ? 'full size' : 'full size: 20,000'}${concurrency === 32 ? '; target ratio ≥ 0.85' : ''}`,
      });
    }
    return out;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Row 5: latency tolerance: 50 ms on every request, concurrency 32, vs the ideal 32 / 0.05 s. */
export async function latencyTolerance(rows: number, concurrency: number, latencyMs: number): Promise<BenchRow[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-latency-'));
  try {
    const file = path.join(dir, 'customers.csv');
    await writeCustomersCsv(file, rows);
    const sub = await subsyncImport(file, rows, concurrency, { latencyMs });
    const ideal = concurrency / (latencyMs / 1000);
    log(`latency ${latencyMs} ms: ${sub.rowsPerSecond.toFixed(0)} rows/s vs ideal ${ideal}`);
    return [{
      figure: `5. Latency tolerance: ${rows.toLocaleString('en')} rows, sandbox latency ${latencyMs} ms, concurrency ${concurrency} (rows/s)`,
      subsync: sub.rowsPerSecond,
      baseline: ideal,
      baselineLabel: `ideal ${concurrency} / ${latencyMs / 1000} s (rows/s)`,
      note: 'end to end incl. enqueue and results',
    }];
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
