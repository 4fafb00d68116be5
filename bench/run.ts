/**
 * `npm run bench`: figures measured in one run on this machine, each beside a
 * baseline measured in the same run. Nothing here asserts; it prints.
 *
 * Present so far: the API client's overhead (schema parsing, error
 * classification, hooks) against a raw undici loop sending the same requests
 * to the same in-process sandbox at the same concurrency. The import, export,
 * rate and latency benchmarks join this table with their issues.
 */
import os from 'node:os';
import { Pool } from 'undici';
import { createApiClient } from '../src/api/client.js';
import type { CustomerInput } from '../src/api/schemas/index.js';
import { startSandbox } from '../src/sandbox/server.js';

const REQUESTS = 20_000;
const CONCURRENCY = 32;

const body = (i: number): CustomerInput => ({
  FirstName: `Bench${i}`, MiddleName: '', LastName: 'Marker', NamePrefix: '', NameSuffix: '', Title: '', Company: '',
  EmailAddress: `bench${i}@example.com`, Password: '', AddressLine1: '', AddressLine2: '', City: '', StateProvince: '',
  PostalCode: '', CountryCode: 'GBR', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
});

/** Runs `task(i)` for i in [0, count) with `concurrency` in flight; returns requests per second. */
async function rate(count: number, concurrency: number, task: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await task(next++);
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

async function measure(name: string, run: (url: string) => Promise<number>): Promise<number> {
  const sandbox = await startSandbox({ port: 0, seed: false });
  try {
    return await run(sandbox.url);
  } finally {
    await sandbox.close();
  }
}

const rows: Array<{ figure: string; subsync: number; baseline: number }> = [];
for (const [label, endpoint] of [['create customer (POST)', 'create'], ['get offer (GET)', 'offer']] as const) {
  const raw = await measure('raw', async (url) => {
    const pool = new Pool(url, { connections: 128, pipelining: 1 });
    try {
      return await rate(REQUESTS, CONCURRENCY, async (i) => {
        const response = endpoint === 'create'
          ? await pool.request({ method: 'POST', path: '/json/customers', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body(i)) })
          : await pool.request({ method: 'GET', path: '/json/offers/STREAM-PLUS' });
        await response.body.json();
      });
    } finally {
      await pool.close();
    }
  });
  const client = await measure('client', async (url) => {
    const api = createApiClient({ baseUrl: url });
    try {
      return await rate(REQUESTS, CONCURRENCY, (i) => (endpoint === 'create' ? api.createCustomer(body(i)) : api.getOffer('STREAM-PLUS')));
    } finally {
      await api.close();
    }
  });
  rows.push({ figure: `API client, ${label}, ${REQUESTS} requests at concurrency ${CONCURRENCY} (req/s)`, subsync: client, baseline: raw });
}

console.log(`machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}`);
console.log('| figure | subsync | baseline (raw undici) | ratio |');
console.log('|---|---:|---:|---:|');
for (const row of rows) {
  console.log(`| ${row.figure} | ${row.subsync.toFixed(0)} | ${row.baseline.toFixed(0)} | ${(row.subsync / row.baseline).toFixed(2)} |`);
}
