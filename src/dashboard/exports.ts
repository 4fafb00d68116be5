import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Queues } from '../queue/queues.js';

/**
 * The exports page reads what is on disk and in BullMQ, not the export
 * module's own types, so it shows any export run (by `subsync export`, the
 * schedule, or an older version): `<dataDir>/exports/customers-*.csv|jsonl`
 * (optionally `.gz`) and the `…manifest.json` written beside each.
 */

/** An export's data file. Temp files (written before the rename) never match. */
export const EXPORT_FILE = /^customers-[A-Za-z0-9._:-]+\.(?:csv|jsonl)(?:\.gz)?$/;
/** An export's manifest. */
export const MANIFEST_FILE = /^customers-[A-Za-z0-9._:-]+manifest\.json$/;

export const exportsDirOf = (dataDir: string): string => path.join(dataDir, 'exports');

export interface ExportRun {
  file: string;
  bytes: number;
  modifiedAt: Date;
  /** The manifest's name, when one is beside the file. */
  manifestFile: string | undefined;
  /** The manifest's fields as written (count, TotalItemCount, sha256, duration, warnings…); undefined when missing or unreadable. */
  manifest: Record<string, unknown> | undefined;
}

/** The data file's name without its format and compression: `customers-2024-01-01T00-00-00Z`. */
const stemOf = (file: string): string => file.replace(/\.(?:csv|jsonl)(?:\.gz)?$/, '');

/** Export runs, newest first. A missing exports folder is no runs. */
export async function listExports(dataDir: string, limit = 100): Promise<ExportRun[]> {
  const dir = exportsDirOf(dataDir);
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  const manifests = names.filter((name) => MANIFEST_FILE.test(name));
  const runs: ExportRun[] = [];
  for (const file of names.filter((name) => EXPORT_FILE.test(name))) {
    const info = await stat(path.join(dir, file)).catch(() => undefined);
    if (!info?.isFile()) continue;
    const stem = stemOf(file);
    // `customers-X.csv.manifest.json` or `customers-X.manifest.json`: the longest name that starts with the file's stem.
    const manifestFile = manifests.filter((m) => m.startsWith(`${file}.`) || m.startsWith(`${stem}.`)).sort((a, b) => b.length - a.length)[0];
    runs.push({ file, bytes: info.size, modifiedAt: info.mtime, manifestFile, manifest: manifestFile ? await readManifest(path.join(dir, manifestFile)) : undefined });
  }
  return runs.sort((a, b) => b.modifiedAt.getTime() - a.modifiedAt.getTime()).slice(0, limit);
}

async function readManifest(file: string): Promise<Record<string, unknown> | undefined> {
  try {
    const parsed: unknown = JSON.parse(await readFile(file, 'utf8'));
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? { ...parsed } : undefined;
  } catch {
    return undefined;
  }
}

/** The path of a file the exports page may hand out, or undefined: only names of the listing's shape, inside the exports folder. */
export function exportPath(dataDir: string, name: string): string | undefined {
  if (!EXPORT_FILE.test(name) && !MANIFEST_FILE.test(name)) return undefined;
  if (name !== path.basename(name) || name.includes('..')) return undefined;
  return path.join(exportsDirOf(dataDir), name);
}

export function contentTypeOf(name: string): string {
  if (name.endsWith('.gz')) return 'application/gzip';
  if (name.endsWith('.json')) return 'application/json';
  if (name.endsWith('.jsonl')) return 'application/x-ndjson';
  return 'text/csv; charset=utf-8';
}

export interface ScheduleView {
  key: string;
  name: string;
  /** The cron pattern, or `every N ms`. */
  when: string;
  tz: string | undefined;
  next: Date | undefined;
  iterations: number | undefined;
}

/** The job schedulers of the control queue (the nightly export is one). */
export async function listSchedules(queues: Queues): Promise<ScheduleView[]> {
  const schedulers = await queues.control.getJobSchedulers(0, -1, true);
  return schedulers.map((s) => ({
    key: s.key,
    name: s.name,
    when: s.pattern ?? (s.every === undefined ? '' : `every ${s.every} ms`),
    tz: s.tz,
    next: s.next === undefined ? undefined : new Date(Number(s.next)),
    iterations: s.iterationCount,
  }));
}
