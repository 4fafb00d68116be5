import { Worker, type Job } from 'bullmq';
import type { RedisClient } from '../redis/redis.js';
import type { Logger } from 'pino';
import type { ApiClient } from '../api/client.js';
import type { ApiBudget } from '../redis/budget.js';
import { EXPORT_JOB, runExportJob } from '../export/job.js';
import { errorGroups } from '../import/errorGroups.js';
import { finalizeImport } from '../import/finalize.js';
import type { ImportStore } from '../store/importStore.js';
import type { CustomerIndex } from '../customers/customerIndex.js';
import type { FailureLog } from '../failureLog.js';
import { deliverNotification, NOTIFY_JOB, type Notifier, type WebhookTarget } from '../notify/notifier.js';
import { CONTROL_QUEUE, FINALIZE_JOB, FinalizeJobDataSchema, type Queues } from '../queue/queues.js';

/** What a control job handler may use. */
export interface ControlDeps {
  connection: RedisClient;
  prefix: string;
  store: ImportStore;
  queues: Queues;
  /** The process's API client, drawing from the fleet-wide budget. */
  api: ApiClient;
  /** That budget (a 429 during an export is the fleet's). */
  budget: ApiBudget;
  dataDir: string;
  logger: Logger;
  /** The customer index: a full export rebuilds it. */
  customers?: CustomerIndex;
  /** SUBSYNC_CSV_BOM: results and CSV exports start with a UTF-8 BOM. Default true. */
  csvBom?: boolean;
  /** SUBSYNC_RETENTION_DAYS: how long a finished import's data stays in Redis. */
  retentionDays?: number;
  /** Repeated failures (a Redis outage) logged once per class and interval. */
  failures?: FailureLog;
  /** Where finished imports and exports are told of (queued, delivered by {@link NOTIFY_JOB}). */
  notifier?: Notifier;
  /** SUBSYNC_WEBHOOK_URL and its secret: the notifications this worker delivers. */
  webhook?: WebhookTarget;
}

/** One handler per control job name; the job's return value is kept as its result. */
export type ControlHandler = (job: Job, deps: ControlDeps) => Promise<unknown>;

const finalize: ControlHandler = async (job, deps) => {
  const { importId, round } = FinalizeJobDataSchema.parse(job.data);
  const files = await finalizeImport({
    store: deps.store,
    queues: deps.queues,
    importId,
    round,
    dataDir: deps.dataDir,
    logger: deps.logger,
    retentionDays: deps.retentionDays,
    bom: deps.csvBom,
    redis: deps.connection,
    notifier: deps.notifier,
  });
  return files?.dir ?? 'stale round';
};

/** File-level work of the control queue, by job name. */
export const CONTROL_HANDLERS: Readonly<Record<string, ControlHandler>> = {
  [FINALIZE_JOB]: finalize,
  [EXPORT_JOB]: runExportJob,
  [NOTIFY_JOB]: (job, deps) => deliverNotification(job, { ...deps, failureGroups: async (importId) => (await errorGroups(deps.store, importId)).groups }),
};

/** Runs file-level jobs: writing an import's results once it settles, exports. */
export function startControlWorker(deps: ControlDeps, options: { concurrency?: number; lockDuration?: number } = {}): Worker {
  const worker = new Worker(
    CONTROL_QUEUE,
    async (job: Job) => {
      const handler = CONTROL_HANDLERS[job.name];
      if (!handler) throw new Error(`unknown control job ${job.name}`);
      return handler(job, deps);
    },
    {
      connection: deps.connection,
      prefix: deps.prefix,
      concurrency: options.concurrency ?? 2,
      ...(options.lockDuration === undefined ? {} : { lockDuration: options.lockDuration }),
    },
  );
  worker.on('error', (error) => (deps.failures ? deps.failures.report('control worker', error) : deps.logger.error({ err: error }, 'control worker error')));
  // A control job that fails (results that cannot be written) says why, once per class and interval.
  worker.on('failed', (job, error) => {
    const place = `control job ${job?.name ?? ''}`.trim();
    if (deps.failures) deps.failures.report(place, error);
    else deps.logger.error({ err: error, jobId: job?.id }, `${place} failed`);
  });
  return worker;
}
