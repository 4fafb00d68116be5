import type { Worker } from 'bullmq';
import type { RedisClient } from './redis/redis.js';
import type { Logger } from 'pino';
import { createApiClient, type ApiClient } from './api/client.js';
import type { CardKeyring } from './cards/crypto.js';
import type { Config } from './config.js';
import { createBudget, type ApiBudget } from './redis/budget.js';
import { startControlWorker } from './workers/controlWorker.js';
import { observeApiCall } from './metrics.js';
import type { BackoffBounds } from './backoff.js';
import { openQueues, type Queues } from './queue/queues.js';
import { checkRedis, createRedis } from './redis/redis.js';
import { startRowWorker } from './workers/rowWorker.js';
import { checkContinuity, importJournal, type ImportJournal } from './store/continuity.js';
import { createImportStore, type ImportStore } from './store/importStore.js';
import { MarkInDoubtError, openRollbackWatch, recentRollbacks, rollbackMessage, type RollbackWatch } from './store/rollback.js';
import { createMarkSync, type MarkSync } from './redis/durable.js';
import { createCustomerIndex, type CustomerIndex } from './customers/customerIndex.js';
import { createCustomerGuard } from './customers/guard.js';
import { createCustomerFinder } from './customers/finder.js';
import { createNameSearch } from './customers/nameSearch.js';
import { createFailureLog, type FailureLog } from './failureLog.js';
import { startSweeper, sweepImport } from './import/sweep.js';
import { createCardCells, type CardCells } from './import/cardCells.js';
import { startFeeder, type Feeder } from './queue/feeder.js';
import { createNotifier, type Notifier } from './notify/notifier.js';

/**
 * The long-lived things one subsync process holds, assembled from the
 * configuration, each with `close()`; `close()` here releases them in reverse
 * order of opening.
 */
export interface Runtime {
  config: Config;
  logger: Logger;
  redis: RedisClient;
  store: ImportStore;
  /** What subsync knows of the service's customers (src/customers/). */
  customers: CustomerIndex;
  queues: Queues;
  keyring: CardKeyring | undefined;
  /** The data dir's record of the imports started here (see checkContinuity). */
  journal: ImportJournal;
  /** Repeated failures (Redis connection errors, rows failing alike) logged once per class and interval. */
  failures: FailureLog;
  /** Lifecycle notifications to SUBSYNC_WEBHOOK_URL (queued; a no-op without it). */
  notifier: Notifier;
  /** Set when Redis lost subsync's data since this data dir last saw it: the explanation. */
  redisLoss: string | undefined;
  /** Detects a Redis that came back without its last acknowledged writes (src/store/rollback.ts). */
  rollbacks: RollbackWatch;
  /** Makes the sent marks written so far durable where Redis allows (WAITAOF, WAIT), one wait per batch at most (src/redis/durable.ts). */
  markSync: MarkSync;
  /** Things opened later (API clients, workers), closed first. */
  adopt(close: () => Promise<void>): void;
  close(): Promise<void>;
}

/** Checks Redis (reachable, noeviction; warns when it persists nothing) and opens the runtime. */
export async function openRuntime(config: Config, logger: Logger, options: { sends?: boolean } = {}): Promise<Runtime> {
  const refuseLoss = options.sends === true && !config.redisAcceptLoss;
  for (const warning of await checkRedis(config.redisUrl, undefined, { cluster: config.redisCluster, refuseLoss })) logger.warn(warning);
  const failures = createFailureLog(logger);
  const redis = createRedis(config.redisUrl, { cluster: config.redisCluster });
  redis.on('error', (error) => failures.report('redis connection', error));
  // The ledger has its own, auto-pipelined connection: a worker's rows read and settle in shared writes.
  const storeRedis = createRedis(config.redisUrl, { autoPipelining: true, cluster: config.redisCluster });
  storeRedis.on('error', (error) => failures.report('redis connection', error));
  // Sent marks have a connection of their own: the wait that makes them durable (WAITAOF, WAIT) blocks nothing else.
  const marksRedis = createRedis(config.redisUrl, { autoPipelining: true, cluster: config.redisCluster });
  marksRedis.on('error', (error) => failures.report('redis connection', error));
  const store = createImportStore(storeRedis, config.queuePrefix, { marks: marksRedis });
  const queues = openQueues(redis, config.queuePrefix, (error) => failures.report('queue connection', error));
  const customers = createCustomerIndex(storeRedis, config.queuePrefix);
  let redisLoss: string | undefined;
  let rollbacks: RollbackWatch;
  try {
    redisLoss = await checkContinuity(redis, config.queuePrefix, config.dataDir);
    if (redisLoss) logger.warn(redisLoss);
    // Every mark and settle tells the watch the rollback counter; a rollback found at start is handled before anything runs.
    // A rollback also leaves the customer index to be read to its end before a create relies on it.
    rollbacks = (await openRollbackWatch({ redis: storeRedis, store, prefix: config.queuePrefix, dataDir: config.dataDir, logger, redisLost: redisLoss !== undefined, distrust: () => customers.distrust() })).watch;
    store.watchSeq(rollbacks);
    // The store's connection is watched by the watch itself; the marks' and the queues' are told.
    for (const connection of [marksRedis, redis]) connection.on('close', () => rollbacks.connectionLost());
    // The start check tells a rollback detected earlier while an import it put in read-back mode is unfinished.
    for (const rollback of await recentRollbacks(storeRedis, store, 5)) {
      const unfinished = await Promise.all(rollback.imports.map(async (id) => {
        const record = await store.getImport(id);
        return record !== undefined && record.finishedAt === undefined;
      }));
      if (unfinished.some(Boolean)) logger.warn(rollbackMessage(rollback));
    }
  } catch (error) {
    // (Redis out of memory refuses the marker's write.) Nothing opened here may keep the process alive.
    await queues.close().catch(() => undefined);
    for (const connection of [marksRedis, storeRedis, redis]) connection.disconnect();
    failures.close();
    throw error;
  }
  const later: Array<() => Promise<void>> = [];
  let closing: Promise<void> | undefined;
  return {
    config,
    logger,
    redis,
    store,
    customers,
    queues,
    keyring: keyringOf(config),
    journal: importJournal(config.dataDir),
    failures,
    notifier: createNotifier({ control: queues.control, enabled: config.webhookUrl !== undefined, logger }),
    redisLoss,
    rollbacks,
    markSync: createMarkSync(marksRedis),
    adopt: (close) => later.push(close),
    close() {
      // Idempotent: a second close waits for the first.
      closing ??= (async () => {
        for (const close of later.reverse()) await close();
        await rollbacks.close();
        await queues.close();
        for (const connection of [marksRedis, storeRedis, redis]) await connection.quit().catch(() => connection.disconnect());
        failures.close();
      })();
      return closing;
    },
  };
}

export function keyringOf(config: Pick<Config, 'cardKey' | 'cardKeyId' | 'cardKeysPrevious'>): CardKeyring | undefined {
  return config.cardKey ? { current: { id: config.cardKeyId, key: config.cardKey }, previous: config.cardKeysPrevious } : undefined;
}

/** The requests whose rows are marked sent before they leave (jobs/index.ts, marksSentFirst). */
const MARKED_CREATES: ReadonlySet<string> = new Set(['createCustomer', 'signUp']);

/** The API client of a worker process: every request draws from the fleet-wide budget. */
export function openApi(runtime: Runtime, apiUrl: string, budget: ApiBudget): ApiClient {
  const api = createApiClient({
    baseUrl: apiUrl,
    auth: runtime.config.apiAuth,
    requestTimeoutMs: runtime.config.httpTimeoutMs,
    // A create waits for the budget after its row was marked sent: one that waited across a lost connection to
    // Redis does not leave (its mark may be gone with the server; the row is read again).
    beforeRequest: async (endpoint) => {
      const epoch = runtime.rollbacks.epoch();
      await budget.acquire();
      if (MARKED_CREATES.has(endpoint) && runtime.rollbacks.epoch() !== epoch) throw new MarkInDoubtError();
    },
    onCall: (call) => {
      observeApiCall(call);
      // What the service admitted feeds the fleet's learned rate (reported with the next acquire).
      budget.observe(call);
    },
  });
  runtime.adopt(() => api.close());
  return api;
}

export interface WorkerHandles {
  rows: ReturnType<typeof startRowWorker>;
  control: Worker | undefined;
  api: ApiClient;
  sweeper: ReturnType<typeof startSweeper>;
  /** Releases imports' batches to the rows queue in turn, while this process holds the fleet's feeder lock. */
  feeder: Feeder;
}

/**
 * Sweeps the unfinished imports a rollback put in read-back mode (src/import/sweep.ts): their rows that no job
 * will run get one, reading back first. One worker of the fleet per lock period (a lock in Redis).
 */
async function sweepReadBackImports(runtime: Runtime, cards: CardCells): Promise<void> {
  const { store, queues, config, logger } = runtime;
  const ids = new Set((await recentRollbacks(store.marks, store, 5)).flatMap((r) => r.imports));
  if (ids.size === 0) return;
  if ((await runtime.redis.set(store.keys.readBackSweepLock, String(process.pid), 'PX', Math.max(1000, Math.floor(config.jobLockMs * 0.9)), 'NX')) !== 'OK') return;
  for (const id of ids) {
    const record = await store.getImport(id);
    if (!record || record.finishedAt !== undefined || record.readBack === undefined) continue;
    const report = await sweepImport(store, queues, id, cards);
    if (report && report.requeued.length > 0) logger.warn({ importId: id, requeued: report.requeued.length }, 'read-back mode: rows without a job queued again, reading back first');
  }
}

/** Starts the row worker (and the control worker unless `control` is false) on `runtime`. */
export function startWorkers(
  runtime: Runtime,
  options: {
    apiUrl: string;
    concurrency: number;
    control?: boolean;
    rate?: number;
    backoff?: BackoffBounds;
    sweep?: { intervalMs?: number; quietMs?: number };
    /** Wait for sent marks to be durable (WAITAOF, WAIT) before their requests leave; default true (false: the bench's baseline). */
    durableMarks?: boolean;
  },
): WorkerHandles {
  const rate = options.rate ?? runtime.config.rate;
  const exportShare = runtime.config.exportShare;
  // Two classes draw from the one budget: the rows (and what they read of the customers), and the export's pages.
  const budget = createBudget(runtime.redis, runtime.store.keys, { rate, class: 'import', exportShare });
  const api = openApi(runtime, options.apiUrl, budget);
  // What the worker's rows read of the service's customers (the index, its deltas and scans) draws from the same budget.
  const refresh = { api, budget, index: runtime.customers, redis: runtime.redis, prefix: runtime.config.queuePrefix };
  const names = createNameSearch(runtime.redis, runtime.config.queuePrefix);
  // Card rows whose sealed cells Redis lost with their jobs read them again from their unchanged files.
  const cards = createCardCells({ journal: runtime.journal, keyring: runtime.keyring, logger: runtime.logger });
  // A worker holds its own connections (BullMQ duplicates for blocking reads).
  const rows = startRowWorker({
    connection: runtime.redis,
    prefix: runtime.config.queuePrefix,
    concurrency: options.concurrency,
    store: runtime.store,
    queues: runtime.queues,
    api,
    budget,
    keyring: runtime.keyring,
    logger: runtime.logger,
    backoff: options.backoff,
    lockMs: runtime.config.jobLockMs,
    guard: createCustomerGuard({ index: runtime.customers, store: runtime.store, refresh, names }),
    names,
    finder: createCustomerFinder({ redis: runtime.redis, prefix: runtime.config.queuePrefix, index: runtime.customers, refresh }),
    failures: runtime.failures,
    markSync: options.durableMarks === false ? undefined : runtime.markSync,
    rollbackSettled: () => runtime.rollbacks.settled(),
    notifier: runtime.notifier,
    reseal: cards.reseal,
    markEpoch: () => runtime.rollbacks.epoch(),
  });
  // Rows no job will run any more (a batch that could not hand them on, jobs lost) are queued again.
  const sweeper = startSweeper({ redis: runtime.redis, store: runtime.store, queues: runtime.queues, logger: runtime.logger, failures: runtime.failures, cards }, options.sweep);
  // After a rollback, a batch that ran on may have completed without rows whose settles Redis lost. The imports
  // in read-back mode are swept every lock period (one worker of the fleet at a time), not only once quiet: any
  // worker does it, whichever one detected the rollback (it may be gone).
  const readBackSweep = setInterval(() => {
    void sweepReadBackImports(runtime, cards).catch((error: unknown) => runtime.failures.report('sweep', error));
  }, runtime.config.jobLockMs);
  readBackSweep.unref();
  const feeder = startFeeder({
    redis: runtime.redis,
    prefix: runtime.config.queuePrefix,
    queues: runtime.queues,
    store: runtime.store,
    logger: runtime.logger,
    failures: runtime.failures,
    rate,
    exportShare,
    concurrency: options.concurrency,
  });
  const exportBudget = createBudget(runtime.redis, runtime.store.keys, { rate, class: 'export', exportShare });
  const control =
    options.control === false
      ? undefined
      : startControlWorker({
          connection: runtime.redis,
          prefix: runtime.config.queuePrefix,
          store: runtime.store,
          queues: runtime.queues,
          // The control queue's API work is the export's: its own class of the budget.
          api: openApi(runtime, options.apiUrl, exportBudget),
          budget: exportBudget,
          dataDir: runtime.config.dataDir,
          logger: runtime.logger,
          customers: runtime.customers,
          csvBom: runtime.config.csvBom,
          retentionDays: runtime.config.retentionDays,
          failures: runtime.failures,
          notifier: runtime.notifier,
          ...(runtime.config.webhookUrl === undefined
            ? {}
            : { webhook: { url: runtime.config.webhookUrl, secret: runtime.config.webhookSecret, dashboardUrl: runtime.config.dashboardUrl } }),
        });
  // Closing a worker lets its active jobs finish; the API client closes after.
  runtime.adopt(async () => {
    clearInterval(readBackSweep);
    await feeder.close();
    await sweeper.stop();
    await Promise.all([rows.close(), control?.close()]);
  });
  return { rows, control, api, sweeper, feeder };
}
