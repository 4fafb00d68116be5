/**
 * Row 4: one export of N customers (created straight into the sandbox's
 * store) by a spawned `subsync worker`, enqueueExport + waitForExport, beside a
 * raw undici loop paging the same customers (take=100) at concurrency 8.
 */
import { Pool } from 'undici';
import { waitForExport } from '../src/cli/export.js';
import { enqueueExport } from '../src/export/job.js';
import { startSandbox } from '../src/sandbox/server.js';
import { log, openBenchRuntime, peakRssMb, runConcurrent, spawnCli, type BenchRow } from './support.js';

const PAGE = 100;
const CONCURRENCY = 8;

export async function exportBench(customers: number): Promise<BenchRow[]> {
  const sandbox = await startSandbox({ port: 0, seed: false });
  for (let i = 0; i < customers; i++) {
    sandbox.store.createCustomer({
      FirstName: `Export${i}`, MiddleName: '', LastName: 'Bench', NamePrefix: '', NameSuffix: '', Title: '', Company: 'Acme, Ltd',
      EmailAddress: `export${i}@example.com`, Password: '', AddressLine1: `${i} Baker Street`, AddressLine2: '', City: 'London', StateProvince: '',
      PostalCode: 'NW1 6XE', CountryCode: 'GBR', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
    });
  }
  const pages = Math.ceil(customers / PAGE);
  const pool = new Pool(sandbox.url, { connections: 32 });
  let raw: number;
  try {
    const seconds = await runConcurrent(pages, CONCURRENCY, async (i) => {
      const response = await pool.request({ method: 'GET', path: `/json/customers?contains=&skip=${i * PAGE}&take=${PAGE}` });
      await response.body.json();
    });
    raw = customers / seconds;
  } finally {
    await pool.close();
  }
  const bench = await openBenchRuntime({ apiUrl: sandbox.url });
  const worker = spawnCli(['worker'], { ...bench.env, SUBSYNC_API_URL: sandbox.url });
  let rss: number | undefined;
  let rowsPerSecond: number;
  try {
    await new Promise((r) => setTimeout(r, 1500)); // the worker's start, not part of the export
    const idle = await peakRssMb(worker.child.pid);
    const started = performance.now();
    const exportId = await enqueueExport(bench.runtime.queues.control, { format: 'csv', gzip: false });
    const record = await waitForExport(bench.runtime, exportId, undefined, 50);
    rowsPerSecond = (record.count ?? 0) / ((performance.now() - started) / 1000);
    rss = await peakRssMb(worker.child.pid);
    if (record.count !== customers) log(`warning: exported ${record.count} of ${customers}`);
    log(`export ${customers}: ${rowsPerSecond.toFixed(0)} rows/s, worker VmHWM ${rss?.toFixed(0)} MB (idle ${idle?.toFixed(0)}), raw ${raw.toFixed(0)} rows/s`);
  } finally {
    worker.child.kill('SIGTERM');
    await worker.exited;
    await bench.close();
    await sandbox.close();
  }
  const size = `${customers.toLocaleString('en')} customers${customers === 100_000 ? '' : ' (issue: 100,000)'}`;
  return [
    { figure: `4. Export ${size}, one \`subsync worker\` process, enqueue to done (rows/s)`, subsync: rowsPerSecond, baseline: raw, baselineLabel: `raw undici paging, take=${PAGE}, concurrency ${CONCURRENCY} (rows/s)`, note: 'file, manifest and spool included' },
    { figure: `4. Export ${size}: worker peak RSS (MB, VmHWM)`, subsync: rss ?? 'not measured', baseline: '—', baselineLabel: '', note: 'whole worker process' },
  ];
}
