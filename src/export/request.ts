/**
 * What an export is asked to do, as its control job carries it. The glossary
 * of the export modules:
 * - listing: one search (`contains`) paged with skip/take; an export has one
 *   (contains empty) or, when the service refuses an empty search, one per
 *   character of EXPORT_DEFAULTS.partitionAlphabet (partitioned);
 * - page: `take` customers of a listing at `skip = index * take`;
 * - round: one pass over some pages of a listing, ended by a probe (a re-read
 *   of its last page) that gives the TotalItemCount at the end of the round;
 * - drift: TotalItemCount moved, or the pages do not add up to it; the
 *   affected range is read again in the next round;
 * - spool: the finished pages on disk, one file each, assembled into the
 *   export file in page order at the end.
 */
import path from 'node:path';
import { z } from 'zod';

/** The control job that runs one export. */
export const EXPORT_JOB = 'export.customers';

export const EXPORT_FORMATS = ['csv', 'jsonl'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

/** The data of an export job (and of the schedule's template). */
export const ExportRequestSchema = z.object({
  format: z.enum(EXPORT_FORMATS).default('csv'),
  gzip: z.boolean().default(false),
  /** Absolute folder for the file and its manifest, on the worker's machine; default `<data dir>/exports`. */
  outDir: z.string().min(1).optional(),
  /** After writing, keep only the newest N exports of that folder (with their manifests). */
  keep: z.number().int().min(1).optional(),
});
export type ExportRequest = z.infer<typeof ExportRequestSchema>;

/** Where exports go unless `--out` says otherwise. */
export const exportsDirOf = (dataDir: string): string => path.join(dataDir, 'exports');

/**
 * The export's id: its job id made safe for file and key names. A job is run
 * again under the same id, which is what lets a retried export resume. A
 * scheduled run's job id is `repeat:<scheduler>:<millis>`.
 */
export const exportIdOf = (jobId: string): string => jobId.replace(/[^A-Za-z0-9_.-]/g, '-');

/** `20250101T020000Z`: sortable, and legal in a file name everywhere. */
export const fileStamp = (epochMs: number): string => new Date(epochMs).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z');
