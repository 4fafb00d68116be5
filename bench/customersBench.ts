/**
 * Requests per row against a service that already holds a realistic base
 * (the sandbox's population, in its own process) of each size in `bases`:
 *
 * - building the customer index (every customer paged once), and the Redis
 *   bytes it takes per customer;
 * - an upsert file of 4,000 rows (`--match EmailAddress`), half existing
 *   customers (each with a changed City), half new people: its dry run's
 *   estimate, then what was sent;
 * - 2,000 creates under 5% 5xx before applying, 2% after, 3%
 *   commit-then-drop;
 * - a list of 500 people imported, then dropped again with its columns in
 *   another order (other bytes: a new import).
 *
 * Each beside its floor: one write per row that must write, plus the paging
 * the plan needs (a scan's pages). Requests are the sandbox's own count of
 * every request it saw, faults and 429s included. The index is built first,
 * as a nightly export or `subsync index refresh` leaves it.
 */
import path from 'node:path';
import { z } from 'zod';
import { createApiClient } from '../src/api/client.js';
import { refreshFull } from '../src/customers/refresh.js';
import { importFile, type ImportRequest } from '../src/import/producer.js';
import { startWorkers } from '../src/runtime.js';
import { spread, writePopulationFile } from './populationFiles.js';
import { log, openBenchRuntime, spawnSandbox, waitFinished, type BenchRow } from './support.js';

const StatsSchema = z.object({ requests: z.number(), byEndpoint: z.record(z.string(), z.number()) });
const UPSERT_ROWS = 4_000;
const FAULT_ROWS = 2_000;
const LIST_ROWS = 500;

export async function customersBench(bases: readonly number[]): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const base of bases) rows.push(...(await oneBase(base)));
  return rows;
}

async function oneBase(base: number): Promise<BenchRow[]> {
  const label = base >= 1_000_000 ? `${base / 1_000_000}M` : `${base / 1000}k`;
  log(`customers: seeding a sandbox with ${base} customers`);
  const sandbox = await spawnSandbox(['--seed-customers', String(base)]);
  const bench = await openBenchRuntime({ apiUrl: sandbox.url });
  const { runtime } = bench;
  const stats = async () => StatsSchema.parse(await (await fetch(`${sandbox.url}/_sandbox/stats`)).json());
  const faults = async (body: Record<string, number>) => fetch(`${sandbox.url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify(body) });
  const deps = { store: runtime.store, queues: runtime.queues, keyring: runtime.keyring, logger: runtime.logger };
  const out: BenchRow[] = [];
  try {
    // The index, as a nightly export or `subsync index refresh` leaves it.
    const api = createApiClient({ baseUrl: sandbox.url });
    const refresh = { api, budget: { block: async () => undefined }, index: runtime.customers, redis: runtime.redis, prefix: bench.prefix };
    let before = await stats();
    const started = performance.now();
    const built = await refreshFull(refresh).finally(() => api.close());
    const seconds = (performance.now() - started) / 1000;
    const memory = await runtime.customers.memory();
    const count = built.meta?.count ?? base;
    const pages = Math.ceil(count / 100);
    out.push({
      figure: `index: build from ${label} customers (requests)`,
      subsync: (await stats()).requests - before.requests,
      baseline: pages,
      baselineLabel: 'pages of 100',
      note: `${seconds.toFixed(1)} s, one read of the listing's end after it`,
    });
    out.push({ figure: `index: Redis bytes per customer at ${label}`, subsync: (memory?.bytes ?? 0) / count, baseline: 64, baselineLabel: 'target', note: `${memory?.keys ?? 0} keys` });

    startWorkers(runtime, { apiUrl: sandbox.url, concurrency: 32 });
    const run = async (request: ImportRequest): Promise<{ requests: number; counts: Record<string, number> }> => {
      before = await stats();
      const result = await importFile({ sendEmptyPasswords: true, ...request }, deps);
      if (result.outcome !== 'enqueued') throw new Error(`not enqueued: ${result.outcome}`);
      const status = await waitFinished(runtime, result.importId, 30 * 60_000);
      return { requests: (await stats()).requests - before.requests, counts: Object.fromEntries(Object.entries(status.counts).filter(([, n]) => n > 0)) };
    };

    // Upsert: half existing (City changed), half new; the dry run's estimate first.
    const upsertFile = await writePopulationFile(path.join(bench.dataDir, `upsert-${label}.csv`), {
      people: [...spread(0, base, UPSERT_ROWS / 2), ...spread(base + 1_000_000, base + 5_000_000, UPSERT_ROWS / 2)],
    });
    const dryApi = createApiClient({ baseUrl: sandbox.url });
    const dry = await importFile(
      { file: upsertFile, match: 'EmailAddress', dryRun: true, sendEmptyPasswords: true },
      { ...deps, api: dryApi, customers: runtime.customers, refresh: { budget: refresh.budget, redis: runtime.redis, prefix: bench.prefix } },
    ).finally(() => dryApi.close());
    const estimate = dry.outcome === 'dry-run' ? dry.estimate : undefined;
    const upsert = await run({ file: upsertFile, match: 'EmailAddress' });
    const scanPages = estimate?.strategy === 'scan' ? pages + 1 : 0;
    out.push({
      figure: `upsert ${UPSERT_ROWS} rows (half existing) at ${label}: requests per row`,
      subsync: upsert.requests / UPSERT_ROWS,
      baseline: (UPSERT_ROWS + scanPages) / UPSERT_ROWS,
      baselineLabel: 'floor',
      note: `plan ${estimate?.strategy ?? '?'}; ${JSON.stringify(upsert.counts)}; target ≤ ${base >= 1_000_000 ? '1.5' : '1.3'}`,
    });
    out.push({
      figure: `upsert at ${label}: dry-run estimate / requests sent`,
      subsync: estimate?.total ?? NaN,
      baseline: upsert.requests,
      baselineLabel: 'sent',
      note: 'target within 10%',
    });

    // Creates under faults.
    await faults({ errorRate: 0.05, errorAfterApplyRate: 0.02, dropAfterCommitRate: 0.03 });
    const faultFile = await writePopulationFile(path.join(bench.dataDir, `faults-${label}.csv`), { people: spread(base + 6_000_000, base + 7_000_000, FAULT_ROWS) });
    const underFaults = await run({ file: faultFile });
    await faults({ errorRate: 0, errorAfterApplyRate: 0, dropAfterCommitRate: 0 });
    out.push({
      figure: `${FAULT_ROWS} creates under 5% 5xx, 2% 5xx after applying, 3% dropped at ${label}: requests per row`,
      subsync: underFaults.requests / FAULT_ROWS,
      baseline: 1,
      baselineLabel: 'floor',
      note: `${JSON.stringify(underFaults.counts)}; target ≤ 1.3`,
    });

    // A list imported, then dropped again with its columns in another order.
    const people = spread(base + 8_000_000, base + 9_000_000, LIST_ROWS);
    await run({ file: await writePopulationFile(path.join(bench.dataDir, `list-${label}.csv`), { people }) });
    const again = await run({ file: await writePopulationFile(path.join(bench.dataDir, `list-again-${label}.csv`), { people, reversed: true }) });
    out.push({
      figure: `a ${LIST_ROWS}-row list dropped again at ${label}: requests per row`,
      subsync: again.requests / LIST_ROWS,
      baseline: 0,
      baselineLabel: 'floor (writes)',
      note: `${JSON.stringify(again.counts)}; nobody created twice`,
    });
    return out;
  } finally {
    await bench.close();
    await sandbox.close();
  }
}
