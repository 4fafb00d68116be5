import { Gauge, Registry } from 'prom-client';
import { metricsRegistry } from '../metrics.js';
import { ROW_STATUSES } from '../outcomes.js';
import type { Runtime } from '../runtime.js';
import { QUEUE_STATES } from './health.js';
import { budgetUse } from '../redis/budget.js';
import { importSchedule, runningImports } from '../queue/feeder.js';
import { READ_TO_END_FIRST } from '../customers/customerIndex.js';

/** How many of the most recent imports `subsync_import_rows` sums. */
export const METRICS_IMPORTS = 1000;

/**
 * What `/metrics` serves: the process's own registry (src/metrics.ts: rows
 * settled, retries, 429s and API latency, counted by the workers of this
 * process) and gauges read from Redis at scrape time, which are the same
 * whichever process is scraped:
 * - `subsync_queue_jobs{queue,state}`: jobs per queue and state;
 * - `subsync_api_budget_rate`: SUBSYNC_RATE (0 = unset);
 * - `subsync_api_budget_learned_rate`: the rate learned from 429s (0 = none);
 * - `subsync_api_budget_blocked_seconds`: how long the budget stays blocked after a 429;
 * - `subsync_import_rows{kind,status}`: rows by kind and outcome, summed over
 *   the most recent {@link METRICS_IMPORTS} imports held in Redis (the whole
 *   fleet's work, where the counters only know their own process's);
 * - `subsync_import_api_requests{kind}`: the requests of those imports as
 *   searches, reads (of one record) and writes;
 * - `subsync_api_budget_requests{class}` and `_class_active{class}`: the
 *   budget's use by the imports and by the export;
 * - `subsync_import_budget_requests{import_id}` and
 *   `subsync_import_rows_per_second{import_id}`: each running import's use
 *   (the label set is the imports running now, so it stays small);
 * - `subsync_customer_index_customers` and `_age_seconds`: the customer
 *   index's size and how long since it was last current (-1: not current).
 *
 * The gauges live in a registry of their own per dashboard (two dashboards
 * in one process, as in tests, must not register a name twice).
 */
export function createScrape(runtime: Runtime): { contentType: string; metrics(): Promise<string> } {
  const registry = new Registry();
  const { queues, redis, store } = runtime;

  new Gauge({
    name: 'subsync_queue_jobs',
    help: 'Jobs per queue and state, read from Redis at scrape time',
    labelNames: ['queue', 'state'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const queue of [queues.rows, queues.control]) {
        const counts = await queue.getJobCounts(...QUEUE_STATES);
        for (const state of QUEUE_STATES) this.set({ queue: queue.name, state }, counts[state] ?? 0);
      }
    },
  });

  new Gauge({
    name: 'subsync_api_budget_rate',
    help: 'Configured API requests per second for the whole fleet (SUBSYNC_RATE); 0 = unset (the rate is learned from 429s)',
    registers: [registry],
    collect() {
      this.set(runtime.config.rate ?? 0);
    },
  });

  new Gauge({
    name: 'subsync_api_budget_learned_rate',
    help: 'API requests per second the fleet learned from 429s (0 = none learned: no 429 lately)',
    registers: [registry],
    async collect() {
      this.set(Number((await redis.hget(store.keys.budgetRate, 'r')) ?? 0));
    },
  });

  new Gauge({
    name: 'subsync_api_budget_blocked_seconds',
    help: 'Seconds until the fleet-wide API budget unblocks after a 429 (0 = not blocked)',
    registers: [registry],
    async collect() {
      const until = Number((await redis.get(store.keys.budgetBlockedUntil)) ?? 0);
      this.set(Math.max(0, until - Date.now()) / 1000);
    },
  });

  new Gauge({
    name: 'subsync_api_budget_requests',
    help: 'Requests the fleet drew from the API budget, by class (import: rows and what they read of the customers; export: its pages), since the budget was last idle for ten minutes',
    labelNames: ['class'] as const,
    registers: [registry],
    async collect() {
      const use = await budgetUse(redis, store.keys);
      this.set({ class: 'import' }, use.import);
      this.set({ class: 'export' }, use.export);
    },
  });

  new Gauge({
    name: 'subsync_api_budget_class_active',
    help: 'Whether a class draws from the API budget now (1) or not (0); while both do, the export has SUBSYNC_EXPORT_SHARE of the rate',
    labelNames: ['class'] as const,
    registers: [registry],
    async collect() {
      const use = await budgetUse(redis, store.keys);
      this.set({ class: 'import' }, use.importActive ? 1 : 0);
      this.set({ class: 'export' }, use.exportActive ? 1 : 0);
    },
  });

  new Gauge({
    name: 'subsync_import_budget_requests',
    help: 'API requests of each import still running (its use of the budget); an import leaves the set when it finishes',
    labelNames: ['import_id'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const id of await runningImports(redis, queues.prefix)) this.set({ import_id: id }, (await store.counts(id)).apiCalls);
    },
  });

  new Gauge({
    name: 'subsync_import_rows_per_second',
    help: 'Rows/s each running import settles lately, as the feeder measures it (its share of the budget, in rows)',
    labelNames: ['import_id'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const id of await runningImports(redis, queues.prefix)) {
        const schedule = await importSchedule(redis, queues.prefix, id);
        if (schedule.rowsPerSecond !== undefined) this.set({ import_id: id }, schedule.rowsPerSecond);
      }
    },
  });

  new Gauge({
    name: 'subsync_import_rows',
    help: `Rows by kind and outcome, summed over the ${METRICS_IMPORTS} most recent imports in Redis`,
    labelNames: ['kind', 'status'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      const ids = await store.listImportIds(METRICS_IMPORTS);
      const imports = await Promise.all(ids.map(async (id) => ({ record: await store.getImport(id), counts: await store.counts(id) })));
      const sums = new Map<string, { kind: string; status: string; n: number }>();
      for (const { record, counts } of imports) {
        if (!record) continue;
        for (const status of ROW_STATUSES) {
          const key = `${record.kind}\0${status}`;
          const sum = sums.get(key) ?? { kind: record.kind, status, n: 0 };
          sum.n += counts.byStatus[status];
          sums.set(key, sum);
        }
      }
      for (const { kind, status, n } of sums.values()) this.set({ kind, status }, n);
    },
  });

  new Gauge({
    name: 'subsync_import_api_requests',
    help: `API requests by kind (search, read, write), summed over the ${METRICS_IMPORTS} most recent imports in Redis`,
    labelNames: ['kind'] as const,
    registers: [registry],
    async collect() {
      const ids = await store.listImportIds(METRICS_IMPORTS);
      const figures = await Promise.all(ids.map((id) => store.counts(id)));
      const sum = (pick: (f: (typeof figures)[number]) => number): number => figures.reduce((total, f) => total + pick(f), 0);
      this.set({ kind: 'search' }, sum((f) => f.searches));
      this.set({ kind: 'read' }, sum((f) => f.reads));
      this.set({ kind: 'write' }, sum((f) => f.apiCalls - f.searches - f.reads));
    },
  });

  new Gauge({
    name: 'subsync_customer_index_customers',
    help: 'Customers in the customer index (0: none built)',
    registers: [registry],
    async collect() {
      this.set((await runtime.customers.meta())?.count ?? 0);
    },
  });

  new Gauge({
    name: 'subsync_customer_index_age_seconds',
    help: 'Seconds since the customer index was last known to hold every customer (-1: none, or not current)',
    registers: [registry],
    async collect() {
      const meta = await runtime.customers.meta();
      this.set(meta && meta.refreshedAt > READ_TO_END_FIRST ? (Date.now() - meta.refreshedAt) / 1000 : -1);
    },
  });

  return {
    contentType: registry.contentType,
    async metrics() {
      const [own, scraped] = await Promise.all([metricsRegistry.metrics(), registry.metrics()]);
      return `${own.trimEnd()}\n\n${scraped}`;
    },
  };
}
