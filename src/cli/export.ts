/**
 * `subsync export`: queues one export of every customer now (a worker with
 * control jobs runs it); with `--wait`, follows it to the end with a progress
 * bar and prints the file and manifest paths. Exit 0 done (every customer
 * present at the start is in the file once; customers created meanwhile are
 * drift, not a failure); 3 the file was written but a customer of the start
 * may be missing or doubled (the service kept changing); 1 failed.
 */
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { ExportIncompleteError } from '../export/errors.js';
import { waitForExport } from '../export/wait.js';
import { enqueueExport } from '../export/job.js';
import { EXPORT_FORMATS, type ExportFormat, type ExportRequest } from '../export/request.js';
import { createExportStore, type ExportRecord } from '../export/state.js';
import type { Runtime } from '../runtime.js';
import { withRuntime } from './context.js';
import { parseNonEmpty } from './options.js';
import { createBar, formatSeconds } from './progress.js';

export interface ExportFlags {
  format: ExportFormat;
  gzip?: boolean;
  out?: string;
  keep?: number;
  wait?: boolean;
  json?: boolean;
}

export function parseFormat(value: string): ExportFormat {
  const format = EXPORT_FORMATS.find((f) => f === value);
  if (!format) throw new InvalidArgumentError(`expected ${EXPORT_FORMATS.join(' or ')}`);
  return format;
}

export function parseKeep(value: string): number {
  const n = /^\d+$/.test(value.trim()) ? Number(value.trim()) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('expected a whole number, 1 or more');
  return n;
}

/** The export options shared by `export` and `schedule export`, as a request. */
export function requestOf(flags: Pick<ExportFlags, 'format' | 'gzip' | 'out' | 'keep'>): ExportRequest {
  return {
    format: flags.format,
    gzip: flags.gzip === true,
    // Resolved here: the worker that writes it has its own working folder.
    outDir: flags.out === undefined ? undefined : path.resolve(flags.out),
    keep: flags.keep,
  };
}

/** Declares the flags `export` and `schedule export` share. */
export function exportOptions(command: Command): Command {
  return command
    .option('--format <format>', 'csv or jsonl', parseFormat, 'csv')
    .option('--gzip', 'gzip the file (.gz)')
    .option('--out <dir>', "folder for the file and its manifest, on the worker's machine (default: $SUBSYNC_DATA_DIR/exports)", parseNonEmpty)
    .option('--keep <n>', 'then keep only the newest N exports of that folder, with their manifests', parseKeep);
}

export function register(program: Command): void {
  exportOptions(program.command('export').description('export every customer into a file now (a worker runs it); --wait follows it to the end'))
    .option('--wait', 'show progress until the file is written; print its path and its manifest')
    .option('--json', 'one JSON object per line instead of text')
    .action(async (flags: ExportFlags) => {
      await withRuntime((runtime) => runExportCommand(runtime, flags));
    });
}

export async function runExportCommand(runtime: Runtime, flags: ExportFlags, out: NodeJS.WritableStream = process.stdout): Promise<ExportRecord | undefined> {
  const print = (text: string, data: Record<string, unknown>): void => {
    out.write(flags.json ? `${JSON.stringify(data)}\n` : `${text}\n`);
  };
  const exportId = await enqueueExport(runtime.queues.control, requestOf(flags));
  print(`export id: ${exportId}`, { exportId });
  if (!flags.wait) {
    print('queued: a `subsync worker` (with control jobs) writes it', { exportId, queued: true });
    return undefined;
  }
  const record = await followExport(runtime, exportId, flags.json ? undefined : process.stderr);
  for (const warning of await createExportStore(runtime.redis, runtime.config.queuePrefix).warnings(exportId)) {
    print(`warning: ${warning}`, { exportId, warning });
  }
  print(`customers: ${record.count ?? 0}`, { exportId, count: record.count, complete: record.complete });
  print(`file: ${record.file ?? ''}`, { exportId, file: record.file });
  print(`manifest: ${record.manifest ?? ''}`, { exportId, manifest: record.manifest });
  if (!record.complete) throw new ExportIncompleteError(exportId, record.manifest ?? '');
  return record;
}

/**
 * Follows the export to its end (src/export/wait.ts), drawing pages done of
 * pages planned, rows/s and ETA on `progressTo`.
 */
export async function followExport(runtime: Runtime, exportId: string, progressTo: NodeJS.WriteStream | undefined): Promise<ExportRecord> {
  const bar = progressTo ? createBar(progressTo) : undefined;
  try {
    const record = await waitForExport(createExportStore(runtime.redis, runtime.config.queuePrefix), runtime.queues, exportId, {
      onProgress: (current) =>
        bar?.draw(current && current.pagesPlanned > 0 ? current.pagesDone / current.pagesPlanned : undefined, current ? progressText(current) : 'waiting for a worker…', false),
    });
    bar?.draw(1, progressText(record), true);
    return record;
  } finally {
    bar?.end();
  }
}

function progressText(record: ExportRecord, now = Date.now()): string {
  const seconds = Math.max(0.001, (now - record.startedAt) / 1000);
  const rate = record.rows / seconds;
  const pagesPerSecond = record.pagesDone / seconds;
  const left = record.pagesPlanned - record.pagesDone;
  const eta = record.phase === 'done' ? 0 : pagesPerSecond > 0 && record.pagesPlanned > 0 ? Math.round(left / pagesPerSecond) : undefined;
  const phase = record.phase === 'writing' ? '  writing the file' : record.status === 'retrying' ? `  retrying: ${record.error ?? ''}` : '';
  return `${record.pagesDone.toLocaleString('en')}/${record.pagesPlanned > 0 ? record.pagesPlanned.toLocaleString('en') : '…'} pages  ${rate.toFixed(0)} rows/s  ETA ${eta === undefined ? '…' : formatSeconds(eta)}${phase}`;
}
