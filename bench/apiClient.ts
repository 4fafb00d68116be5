/**
 * Row 0: the API client's overhead (schema parsing, error classification,
 * hooks) against a raw undici loop sending the same requests to the same
 * in-process sandbox at the same concurrency.
 */
import { Pool } from 'undici';
import { createApiClient } from '../src/api/client.js';
import type { CustomerInput } from '../src/api/schemas/index.js';
import { startSandbox } from '../src/sandbox/server.js';
import { runConcurrent, type BenchRow } from './support.js';

const body = (i: number): CustomerInput => ({
  FirstName: `Bench${i}`, MiddleName: '', LastName: 'Marker', NamePrefix: '', NameSuffix: '', Title: '', Company: '',
  EmailAddress: `bench${i}@example.com`, Password: '', AddressLine1: '', AddressLine2: '', City: '', StateProvince: '',
  PostalCode: '', CountryCode: 'GBR', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
});

async function measure(run: (url: string) => Promise<number>): Promise<number> {
  const sandbox = await startSandbox({ port: 0, seed: false });
  try {
    return await run(sandbox.url);
  } finally {
    await sandbox.close();
  }
}

export async function apiClient(requests: number, concurrency: number): Promise<BenchRow[]> {
  const out: BenchRow[] = [];
  for (const [label, endpoint] of [['create customer (POST)', 'create'], ['get offer (GET)', 'offer']] as const) {
    const raw = await measure(async (url) => {
      const pool = new Pool(url, { connections: 128, pipelining: 1 });
      try {
        return requests / (await runConcurrent(requests, concurrency, async (i) => {
          const response = endpoint === 'create'
            ? await pool.request({ method: 'POST', path: '/json/customers', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body(i)) })
            : await pool.request({ method: 'GET', path: '/json/offers/STREAM-PLUS' });
          await response.body.json();
        }));
      } finally {
        await pool.close();
      }
    });
    const client = await measure(async (url) => {
      const api = createApiClient({ baseUrl: url });
      try {
        return requests / (await runConcurrent(requests, concurrency, (i) => (endpoint === 'create' ? api.createCustomer(body(i)) : api.getOffer('STREAM-PLUS'))));
      } finally {
        await api.close();
      }
    });
    out.push({ figure: `0. API client, ${label}, ${requests.toLocaleString('en')} requests at concurrency ${concurrency} (req/s)`, subsync: client, baseline: raw, baselineLabel: 'raw undici, same requests (req/s)', note: '' });
  }
  return out;
}
