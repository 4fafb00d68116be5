/**
 * `npm run bench`: one table of figures measured in one run on this machine,
 * each beside a baseline measured in the same run (or its target, where it
 * has one), with the ratio. Nothing here asserts; it prints.
 *
 * One file per measurement (apiClient, importThroughput, producer,
 * rateAdherence, exportBench); this file orchestrates and prints. Sizes are
 * the full ones (about 15 minutes on 2 cores), each row naming its size; for a
 * quicker look set BENCH_IMPORT_ROWS, BENCH_PRODUCER_SMALL,
 * BENCH_PRODUCER_LARGE, BENCH_RATE_ROWS, BENCH_EXPORT_CUSTOMERS,
 * BENCH_LATENCY_ROWS, BENCH_DURABLE_ROWS, BENCH_CUSTOMER_BASES (e.g. 10000,100000), BENCH_HISTORY_ROWS,
 * BENCH_HISTORY_IMPORTS, the BENCH_SHARE_* sizes of bench/shareBench.ts
 * (BENCH_SHARE_ONLY=1,4 picks its scenarios);
 * BENCH_ONLY=import,latency runs only the steps whose
 * names hold those words. Progress goes to stderr, the table to stdout.
 * `node dist/bench/profileImport.js [ROWS]` profiles a worker during an import.
 */
import os from 'node:os';
import { apiClient } from './apiClient.js';
import { customersBench } from './customersBench.js';
import { durableMarks } from './durableMarks.js';
import { exportBench } from './exportBench.js';
import { fleetStart } from './fleetStart.js';
import { historyBench } from './historyBench.js';
import { importThroughput, latencyTolerance } from './importThroughput.js';
import { loadAverage, PIPELINE_CONCURRENCY, pipelineBench } from './pipeline.js';
import { producer } from './producer.js';
import { rateAdherence } from './rateAdherence.js';
import { shareBench } from './shareBench.js';
import { fmt, log, ratio, type BenchRow } from './support.js';

const size = (name: string, fallback: number): number => {
  const value = Number(process.env[name]);
  return Number.isSafeInteger(value) && value > 0 ? value : fallback;
};

const SIZES = {
  importRows: size('BENCH_IMPORT_ROWS', 20_000),
  producerSmall: size('BENCH_PRODUCER_SMALL', 100_000),
  producerLarge: size('BENCH_PRODUCER_LARGE', 1_000_000),
  rateRows: size('BENCH_RATE_ROWS', 4_000),
  exportCustomers: size('BENCH_EXPORT_CUSTOMERS', 100_000),
  latencyRows: size('BENCH_LATENCY_ROWS', 6_400),
  /** Rows of each import of the durable-marks step (BENCH_DURABLE_ROWS). */
  durableRows: size('BENCH_DURABLE_ROWS', 10_000),
  historyRows: size('BENCH_HISTORY_ROWS', 100_000),
  historyImports: size('BENCH_HISTORY_IMPORTS', 1_000),
  /** Sizes of the service's customer base for the requests-per-row figures: BENCH_CUSTOMER_BASES=10000,100000. */
  customerBases: (process.env.BENCH_CUSTOMER_BASES?.split(',').map(Number).filter((n) => Number.isSafeInteger(n) && n > 0) ?? []).concat(
    process.env.BENCH_CUSTOMER_BASES ? [] : [10_000, 100_000, 1_000_000],
  ),
};

const started = performance.now();
const rows: BenchRow[] = [];
// BENCH_ONLY=import,latency (words of the step names) runs only those steps.
const only = process.env.BENCH_ONLY?.split(',').map((w) => w.trim().toLowerCase()).filter(Boolean);
const step = async (name: string, run: () => Promise<BenchRow[]>): Promise<void> => {
  if (only && !only.some((word) => name.toLowerCase().includes(word))) return;
  log(`${name}…`);
  const t = performance.now();
  try {
    rows.push(...(await run()));
  } catch (error) {
    log(`${name} failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
    rows.push({ figure: `${name}: FAILED`, subsync: '—', baseline: '—', baselineLabel: '', note: error instanceof Error ? error.message.slice(0, 200) : String(error) });
  }
  log(`${name} took ${((performance.now() - t) / 1000).toFixed(0)} s`);
};

await step('API client', () => apiClient(20_000, 32));
await step('import throughput', () => importThroughput(SIZES.importRows, [8, 32, 64]));
await step('producer', () => producer([SIZES.producerSmall, SIZES.producerLarge]));
await step('rate adherence', () => rateAdherence(SIZES.rateRows, 200));
await step('export', () => exportBench(SIZES.exportCustomers));
await step('fleet start', () => fleetStart(3, 5));
await step('latency tolerance', () => latencyTolerance(SIZES.latencyRows, 32, 50));
await step('pipeline: end to end against the raw loop, at 0/10/20/50 ms', () =>
  pipelineBench({
    rows: size('BENCH_PIPELINE_ROWS', 20_000),
    latencies: process.env.BENCH_PIPELINE_LATENCIES?.split(',').map(Number).filter((n) => Number.isSafeInteger(n) && n >= 0) ?? [0, 10, 20, 50],
    rateRows: size('BENCH_PIPELINE_RATE_ROWS', 4_000),
    rateRuns: size('BENCH_PIPELINE_RATE_RUNS', 3),
    concurrency: size('BENCH_PIPELINE_CONCURRENCY', PIPELINE_CONCURRENCY),
  }),
);
await step('customers: requests per row on a large base', () => customersBench(SIZES.customerBases));
await step('durable marks: what the Redis settings cost', () => durableMarks(SIZES.durableRows, 32));
await step('history and search', () => historyBench(SIZES.historyRows, SIZES.historyImports));
await step('share of the budget between imports and the export', () =>
  shareBench({
    rate: size('BENCH_SHARE_RATE', 50),
    big: size('BENCH_SHARE_BIG', 3_000),
    customers: size('BENCH_SHARE_CUSTOMERS', 20_000),
    exportImport: size('BENCH_SHARE_EXPORT_IMPORT', 6_000),
  }),
);

const cpus = os.cpus();
console.log(`machine: ${cpus.length} × ${cpus[0]?.model ?? 'cpu'}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}`);
console.log(`load average at the end (1, 5, 15 min): ${await loadAverage()}`);
console.log(`command: npm run bench (node ${process.argv.slice(1).join(' ')}); whole run ${((performance.now() - started) / 1000).toFixed(0)} s`);
console.log('| figure | subsync | baseline | baseline is | ratio | note |');
console.log('|---|---:|---:|---|---:|---|');
for (const row of rows) {
  console.log(`| ${row.figure} | ${fmt(row.subsync)} | ${fmt(row.baseline)} | ${row.baselineLabel} | ${ratio(row.subsync, row.baseline)} | ${row.note} |`);
}
