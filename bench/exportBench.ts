/**
 * Row 4: one export of N customers (created straight into the sandbox's
 * store) by a spawned `subsync worker`, enqueueExport to the record's
 * finishedAt, beside a raw undici loop paging the same customers.
 *
 * The comparison is kept fair both ways:
 * - same sandbox (this process), same page size (take=100), same concurrency
 *   (the export's EXPORT_DEFAULTS.concurrency), a sliding window of requests;
 * - the raw loop runs in a process of its own, as the worker does: in this
 *   process it would share one thread with the sandbox, while the worker has
 *   a core to itself, which made the baseline look slower than paging is;
 * - it parses every page (an export must read what it pages) but writes no
 *   file and draws from no budget;
 * - it runs once before the export and once after, and the baseline is their
 *   mean: the first warms the sandbox for the export, and other load on the
 *   machine shifts both alike;
 * - the export is timed to the `finishedAt` its record holds (file renamed,
 *   manifest written), not to the next 50 ms poll.
 */
import { spawn } from 'node:child_process';
import { waitForExport } from '../src/export/wait.js';
import { createExportStore } from '../src/export/state.js';
import { enqueueExport } from '../src/export/job.js';
import { EXPORT_DEFAULTS, SEARCH_PAGE_SIZE } from '../src/policy.js';
import { startSandbox } from '../src/sandbox/server.js';
import { log, openBenchRuntime, peakRssMb, root, spawnCli, type BenchRow } from './support.js';

const PAGE = SEARCH_PAGE_SIZE;
const CONCURRENCY = EXPORT_DEFAULTS.concurrency;

/** The raw loop, run by a child `node`: pages 0..pages-1 with `concurrency` in flight; prints the seconds it took. */
const RAW_LOOP = `
import { Pool } from 'undici';
const [url, pages, concurrency, take] = process.argv.slice(1).map((a, i) => (i === 0 ? a : Number(a)));
const pool = new Pool(url, { connections: concurrency });
let next = 0;
let rows = 0;
const started = performance.now();
await Promise.all(Array.from({ length: concurrency }, async () => {
  while (next < pages) {
    const response = await pool.request({ method: 'GET', path: '/json/customers?contains=&skip=' + next++ * take + '&take=' + take });
    const body = await response.body.json();
    if (response.statusCode !== 200) throw new Error('status ' + response.statusCode);
    rows += body.Customers.length;
  }
}));
const seconds = (performance.now() - started) / 1000;
await pool.close();
process.stdout.write(JSON.stringify({ seconds, rows }));
`;

async function rawPaging(url: string, customers: number): Promise<number> {
  const pages = Math.ceil(customers / PAGE);
  const child = spawn(process.execPath, ['--input-type=module', '-e', RAW_LOOP, url, String(pages), String(CONCURRENCY), String(PAGE)], { cwd: root });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`raw paging exited ${code}: ${err.slice(0, 500)}`);
  const { seconds, rows } = JSON.parse(out) as { seconds: number; rows: number };
  if (rows !== customers) throw new Error(`raw paging read ${rows} of ${customers}`);
  return rows / seconds;
}

export async function exportBench(customers: number): Promise<BenchRow[]> {
  const sandbox = await startSandbox({ port: 0, seed: false });
  for (let i = 0; i < customers; i++) {
    sandbox.store.createCustomer({
      FirstName: `Export${i}`, MiddleName: '', LastName: 'Bench', NamePrefix: '', NameSuffix: '', Title: '', Company: 'Acme, Ltd',
      EmailAddress: `export${i}@example.com`, Password: '', AddressLine1: `${i} Baker Street`, AddressLine2: '', City: 'London', StateProvince: '',
      PostalCode: 'NW1 6XE', CountryCode: 'GBR', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
    });
  }
  const rawBefore = await rawPaging(sandbox.url, customers);
  const bench = await openBenchRuntime({ apiUrl: sandbox.url });
  const worker = spawnCli(['worker'], { ...bench.env, SUBSYNC_API_URL: sandbox.url });
  let rss: number | undefined;
  let rowsPerSecond: number;
  let rawAfter: number;
  try {
    await new Promise((r) => setTimeout(r, 1500)); // the worker's start, not part of the export
    const idle = await peakRssMb(worker.child.pid);
    const enqueuedAt = Date.now();
    const exportId = await enqueueExport(bench.runtime.queues.control, { format: 'csv', gzip: false });
    const record = await waitForExport(createExportStore(bench.runtime.redis, bench.runtime.config.queuePrefix), bench.runtime.queues, exportId, { pollMs: 50 });
    rowsPerSecond = (record.count ?? 0) / (((record.finishedAt ?? Date.now()) - enqueuedAt) / 1000);
    rss = await peakRssMb(worker.child.pid);
    if (record.count !== customers) log(`warning: exported ${record.count} of ${customers}`);
    rawAfter = await rawPaging(sandbox.url, customers);
    log(
      `export ${customers}: ${rowsPerSecond.toFixed(0)} rows/s, worker VmHWM ${rss?.toFixed(0)} MB (idle ${idle?.toFixed(0)}), ` +
        `raw ${rawBefore.toFixed(0)} before and ${rawAfter.toFixed(0)} after (rows/s)`,
    );
  } finally {
    worker.child.kill('SIGTERM');
    await worker.exited;
    await bench.close();
    await sandbox.close();
  }
  const raw = (rawBefore + rawAfter) / 2;
  const size = `${customers.toLocaleString('en')} customers${customers === 100_000 ? '' : ' (the full size: 100,000)'}`;
  return [
    { figure: `4. Export ${size}, one \`subsync worker\` process, enqueue to done (rows/s)`, subsync: rowsPerSecond, baseline: raw, baselineLabel: `raw undici paging in its own process, take=${PAGE}, concurrency ${CONCURRENCY}, mean of before and after (rows/s)`, note: 'file, manifest and spool included' },
    { figure: `4. Export ${size}: worker peak RSS (MB, VmHWM)`, subsync: rss ?? 'not measured', baseline: 200, baselineLabel: 'target (MB)', note: 'whole worker process' },
  ];
}
