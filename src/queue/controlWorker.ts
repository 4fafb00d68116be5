import { Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { finalizeImport } from '../import/finalize.js';
import type { ImportStore } from '../store/importStore.js';
import { CONTROL_QUEUE, FINALIZE_JOB, FinalizeJobDataSchema } from './queues.js';

export interface ControlWorkerOptions {
  connection: Redis;
  prefix: string;
  store: ImportStore;
  dataDir: string;
  logger: Logger;
}

/** Runs file-level jobs: writing an import's results once it settles (exports join later). */
export function startControlWorker(options: ControlWorkerOptions): Worker {
  const worker = new Worker(
    CONTROL_QUEUE,
    async (job: Job) => {
      if (job.name !== FINALIZE_JOB) throw new Error(`unknown control job ${job.name}`);
      const { importId, round } = FinalizeJobDataSchema.parse(job.data);
      const files = await finalizeImport({ store: options.store, importId, round, dataDir: options.dataDir, logger: options.logger });
      return files?.dir ?? 'stale round';
    },
    { connection: options.connection, prefix: options.prefix, concurrency: 2 },
  );
  worker.on('error', (error) => options.logger.error({ err: error }, 'control worker error'));
  return worker;
}
