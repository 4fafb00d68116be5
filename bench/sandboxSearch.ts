/**
 * Measures the sandbox at scale: seeding time and memory, search latency over
 * HTTP for common names, rare names and the empty search paged deep, and the
 * duplicates check.
 *
 *   npm run build && node --expose-gc dist/bench/sandboxSearch.js [CUSTOMERS=1000000] [REQUESTS=300]
 *
 * Prints one line per figure. Deterministic customers (population seed 1);
 * the pages asked for are drawn from a fixed seed too.
 */
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { COMMON_SURNAMES, FIRST_NAMES, RARE_SURNAMES } from '../src/sandbox/population.js';
import { startSandbox, type Sandbox } from '../src/sandbox/server.js';
import { random as seededRandom } from './make-customers.js';

const SearchAnswerSchema = z.object({ TotalItemCount: z.number(), Customers: z.array(z.object({ CustomerID: z.string() })) });

interface Latencies {
  label: string;
  millis: number[];
}

export async function measure(customers: number, requests: number): Promise<void> {
  collectGarbage();
  const rssBefore = process.memoryUsage().rss;
  const startedAt = performance.now();
  const sandbox = await startSandbox({ port: 0, seedCustomers: customers });
  const seedMillis = performance.now() - startedAt;
  collectGarbage();
  const memory = process.memoryUsage();
  line(`seeded ${customers} customers in ${(seedMillis / 1000).toFixed(2)} s`);
  line(`rss ${mb(memory.rss)} MB (${mb(memory.rss - rssBefore)} MB more than before seeding), heap used ${mb(memory.heapUsed)} MB`);
  try {
    const random = seededRandom(42);
    // The first requests pay for the connection and for compiling the handlers: not the index's cost.
    await timed(sandbox, 'warm-up', ['qqq', 'qqqq', 'wxy', '', 'zzv'].map((contains) => ({ contains, skip: 0 })));
    const common = ['smith', 'lee', ...COMMON_SURNAMES.slice(1, 8).map((name) => name.toLowerCase())];
    const results: Latencies[] = [
      await timed(sandbox, 'first search per common name (cold: merge)', common.map((name) => ({ contains: name, skip: 0 }))),
      await timed(sandbox, 'common names, random pages (cached)', pages(common, requests, random, sandbox)),
      await timed(sandbox, 'rare surnames, each new (cold)', Array.from({ length: requests }, () => ({ contains: pickRare(random), skip: 0 }))),
      await timed(sandbox, 'empty contains, random deep skip', Array.from({ length: requests }, () => ({ contains: '', skip: Math.floor(random() * customers) }))),
      await timed(sandbox, 'one letter (a, e, o; cold then cached)', ['a', 'e', 'o', 'a', 'e', 'o'].map((contains) => ({ contains, skip: 0 }))),
      await timed(sandbox, 'first names (cold)', FIRST_NAMES.slice(0, 50).map((name) => ({ contains: name.toLowerCase(), skip: 0 }))),
      await createsBetweenSearches(sandbox, requests),
    ];
    for (const { label, millis } of results) line(`${label}: ${describe(millis)}`);
    const [cold] = results;
    if (cold) line(`  each: ${common.map((name, i) => `${name} ${(cold.millis[i] ?? 0).toFixed(1)}`).join(', ')} (ms)`);
    const started = performance.now();
    const duplicates = z.object({ count: z.number() }).parse(await (await fetch(`${sandbox.url}/_sandbox/duplicates`)).json());
    line(`GET /_sandbox/duplicates: ${duplicates.count} found in ${(performance.now() - started).toFixed(0)} ms`);
  } finally {
    await sandbox.close();
  }
}

async function timed(sandbox: Sandbox, label: string, queries: Array<{ contains: string; skip: number }>): Promise<Latencies> {
  const millis: number[] = [];
  for (const { contains, skip } of queries) {
    const started = performance.now();
    await search(sandbox, contains, skip);
    millis.push(performance.now() - started);
  }
  return { label, millis };
}

/** A create (of a Smith) then a search for "smith": the cached list must grow, not be rebuilt. */
async function createsBetweenSearches(sandbox: Sandbox, requests: number): Promise<Latencies> {
  const millis: number[] = [];
  for (let i = 0; i < requests; i++) {
    const created = await fetch(`${sandbox.url}/json/customers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        FirstName: 'Kathleen', MiddleName: '', LastName: 'Smith', NamePrefix: '', NameSuffix: '', Title: '', Company: '',
        EmailAddress: `kathleen.smith.measure${i}@example.com`, Password: '', AddressLine1: '', AddressLine2: '', City: '',
        StateProvince: '', PostalCode: '', CountryCode: '', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
      }),
    });
    await created.arrayBuffer();
    const started = performance.now();
    await search(sandbox, 'smith', 0);
    millis.push(performance.now() - started);
  }
  return { label: 'search "smith" right after each create of a Smith', millis };
}

async function search(sandbox: Sandbox, contains: string, skip: number): Promise<void> {
  const response = await fetch(`${sandbox.url}/json/customers?contains=${encodeURIComponent(contains)}&skip=${skip}&take=100`);
  const answer = SearchAnswerSchema.parse(await response.json());
  if (answer.TotalItemCount === 0 && contains === '') throw new Error('the empty search found nobody');
}

function pages(names: readonly string[], count: number, random: () => number, sandbox: Sandbox): Array<{ contains: string; skip: number }> {
  return Array.from({ length: count }, () => {
    const contains = names[Math.floor(random() * names.length)] ?? 'smith';
    // Within the matches: about 1% of the customers have a given common surname.
    return { contains, skip: Math.floor(random() * Math.max(1, sandbox.store.customerCount() / 200)) };
  });
}

function pickRare(random: () => number): string {
  return (RARE_SURNAMES[Math.floor(random() * RARE_SURNAMES.length)] ?? 'x').toLowerCase();
}

function describe(millis: readonly number[]): string {
  const sorted = [...millis].sort((a, b) => a - b);
  const at = (q: number): string => (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0).toFixed(2);
  return `n ${sorted.length}, p50 ${at(0.5)} ms, p95 ${at(0.95)} ms, max ${(sorted[sorted.length - 1] ?? 0).toFixed(2)} ms`;
}

/** Runs a full collection when node was started with --expose-gc, so RSS reflects what is kept. */
function collectGarbage(): void {
  const gc: unknown = Reflect.get(globalThis, 'gc');
  if (typeof gc === 'function') gc();
}

const mb = (bytes: number): string => (bytes / 1024 / 1024).toFixed(0);
const line = (text: string): void => void process.stdout.write(`${text}\n`);

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [customers = '1000000', requests = '300'] = process.argv.slice(2);
  await measure(Number(customers), Number(requests));
}
