/**
 * The nightly export: one BullMQ job scheduler on the control queue
 * (`upsertJobScheduler`, BullMQ v6), under a fixed id, so registering it from
 * any number of processes, any number of times, leaves exactly one schedule
 * (the last registration's pattern and options win). Each firing adds one
 * export job (`repeat:<id>:<millis>`), which any control worker runs.
 */
import { getNextMillis, type Queue } from 'bullmq';
import { EXPORT_JOB_OPTIONS } from './job.js';
import { EXPORT_JOB, ExportRequestSchema, type ExportRequest } from './request.js';
import { SubsyncError } from '../errors.js';

/** The one export schedule's id. */
export const EXPORT_SCHEDULER_ID = 'subsync-export';

/** A bad cron pattern or time zone: the command line says which and why. */
export class ScheduleError extends SubsyncError {
  readonly code = 'SCHEDULE_INVALID';
}

export interface ExportSchedule {
  id: string;
  pattern: string;
  /** IANA zone the pattern is read in; UTC when unset. */
  tz: string;
  /** Epoch ms of the next firing, when known. */
  next: number | undefined;
  request: ExportRequest;
}

/**
 * Checks a cron pattern (5 fields, or 6 with seconds first) and an IANA time
 * zone the way the scheduler will read them; returns the next firing.
 */
export function checkSchedule(pattern: string, tz: string, now = Date.now()): number {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
  } catch {
    throw new ScheduleError(`unknown time zone "${tz}" (an IANA name such as UTC or Europe/Paris)`);
  }
  let next: number | undefined;
  try {
    next = getNextMillis(now, { pattern, tz });
  } catch (error) {
    throw new ScheduleError(`invalid cron pattern "${pattern}": ${error instanceof Error ? error.message : String(error)}`);
  }
  if (next === undefined) throw new ScheduleError(`cron pattern "${pattern}" never fires`);
  return next;
}

/** Creates or replaces the export schedule. */
export async function scheduleExport(control: Queue, input: { pattern: string; tz: string; request: ExportRequest }): Promise<ExportSchedule> {
  checkSchedule(input.pattern, input.tz);
  const request = ExportRequestSchema.parse(input.request);
  await control.upsertJobScheduler(EXPORT_SCHEDULER_ID, { pattern: input.pattern, tz: input.tz }, { name: EXPORT_JOB, data: request, opts: EXPORT_JOB_OPTIONS });
  const saved = (await listSchedules(control)).find((s) => s.id === EXPORT_SCHEDULER_ID);
  if (!saved) throw new Error('the export schedule vanished as it was saved');
  return saved;
}

/** Every job scheduler of the control queue that runs exports. */
export async function listSchedules(control: Queue): Promise<ExportSchedule[]> {
  const schedulers = await control.getJobSchedulers(0, -1, true);
  return schedulers
    .filter((s) => s.name === EXPORT_JOB)
    .map((s) => ({
      id: s.key,
      pattern: s.pattern ?? (s.every === undefined ? '' : `every ${s.every} ms`),
      tz: s.tz ?? 'UTC',
      next: s.next,
      request: ExportRequestSchema.catch({ format: 'csv', gzip: false }).parse(s.template?.data ?? {}),
    }));
}

/** Removes the export schedule; false when there was none. */
export async function removeSchedule(control: Queue, id = EXPORT_SCHEDULER_ID): Promise<boolean> {
  return control.removeJobScheduler(id);
}
