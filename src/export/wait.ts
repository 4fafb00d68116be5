import { setTimeout as sleep } from 'node:timers/promises';
import type { Queues } from '../queue/queues.js';
import { ExportFailedError } from './errors.js';
import type { ExportRecord, ExportStore } from './state.js';

export interface WaitOptions {
  /** Called on every poll with the record so far (undefined until a worker has started the export). */
  onProgress?: (record: ExportRecord | undefined) => void;
  pollMs?: number;
}

/**
 * Polls the export's record in Redis until it is done. Throws
 * ExportFailedError when the export (or its job, before it had a record)
 * failed for good.
 */
export async function waitForExport(store: ExportStore, queues: Queues, exportId: string, options: WaitOptions = {}): Promise<ExportRecord> {
  for (;;) {
    const record = await store.get(exportId);
    if (record?.status === 'done') return record;
    if (record?.status === 'failed') throw new ExportFailedError(exportId, record.error ?? 'unknown reason');
    if (!record) {
      const job = await queues.control.getJob(exportId);
      if (!job) throw new ExportFailedError(exportId, 'its job is not in the queue');
      if ((await job.getState()) === 'failed') throw new ExportFailedError(exportId, job.failedReason || 'unknown reason');
    }
    options.onProgress?.(record);
    await sleep(options.pollMs ?? 250);
  }
}
