/**
 * The export's files: `customers-<UTC stamp>.csv` or
 * `.jsonl`, optionally `.gz`, and `customers-<UTC stamp>.manifest.json`
 * beside it; and pruning past `--keep N`.
 *
 * - CSV: a header row of every customer field of the service's interface,
 *   CustomerID first; every cell quoted (empty ones too) and passed through
 *   `escapeFormula`, since people open exports in
 *   spreadsheets (the importer undoes the escape, so an export dropped back
 *   as an update file stores the values it shows); UTF-8 with a BOM, so that
 *   a spreadsheet reads it as UTF-8 (`bom: false` for machine consumers), LF
 *   line ends. A null MobileNumber is an empty cell.
 * - JSONL: one JSON object per customer, the same fields in the same order,
 *   values as the service gave them (MobileNumber may be null); no formula
 *   escaping, since JSONL is read by programs and a `'` would change values.
 * - Password is always empty: the interface returns it empty, and a
 *   credential never belongs in an export.
 *
 * Rows are formatted here once per page read (`formatPage`, by the pager, into
 * the spool); the file is streamed to a temp name in the same folder from
 * those bytes, hashed on the way (sha256 of the bytes written, after gzip:
 * what `sha256sum` shows), fsync'd and renamed; the manifest is written the
 * same way after it, so a manifest always describes a whole file. Files are
 * mode 0640: they hold personal data.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { CUSTOMER_FIELDS, type Customer } from '../api/schemas/index.js';
import { escapeFormula } from '../results/formula.js';
import { RESULT_FILE_MODE } from '../results/writeResults.js';
import { syncDirectory, tempPathFor, writeFileAtomic } from '../files.js';
import type { ExportFormat } from './request.js';
import type { PageRows } from './spool.js';

/** What the manifest says about one export. */
export interface ExportManifest {
  exportId: string;
  /** The export file's name, in the manifest's folder. */
  file: string;
  format: ExportFormat;
  gzip: boolean;
  /** The columns (CSV) or members (JSONL), in order. */
  fields: readonly string[];
  /** Customers written, each CustomerID once. */
  count: number;
  /** TotalItemCount of the first page and of the last probe; null when partitioned (each search has its own). */
  totalItemCount: { atStart: number | null; atEnd: number | null };
  /**
   * Every customer present at the start is in the file exactly once: every page agreed with the final
   * TotalItemCount and `count` equals it, or the listing only grew at its end and every position below
   * `totalItemCount.atStart` was read (pager.ts `coversStart`). Partitioned: every search did.
   */
  complete: boolean;
  /** sha256 of the file's bytes on disk (after gzip, when gzipped). */
  sha256: string;
  bytes: number;
  startedAt: string;
  finishedAt: string;
  durationMs: number;
  /** Page reads: all of them, those after the first round (re-reads and their probes), and those a resumed run found finished. */
  pages: { read: number; reread: number; resumed: number };
  requests: number;
  retries: number;
  rateLimited: number;
  /** Runs of the job (more than 1: it was resumed). */
  runs: number;
  mode: 'full' | 'partitioned';
  partitions?: Array<{ contains: string; totalAtStart: number | null; totalAtEnd: number | null; complete: boolean }>;
  /**
   * Null when TotalItemCount held still and the pages added up at the first try.
   * `added`: customers written that were created after the export began (null when not complete, or partitioned).
   */
  drift: null | { rounds: number; reread: string; reasons: string[]; added: number | null };
  /** Records not written because their CustomerID already was: a record seen twice across pages, or (partitioned) under two characters. */
  duplicatesDropped: number;
  /** Older exports removed by `--keep`. */
  pruned: string[];
  warnings: string[];
}

/** `customers-<stamp>` names: the data file (`.csv`, `.jsonl`, optionally `.gz`) and the manifest. */
const EXPORT_NAME = /^(customers-[0-9TZ]+(?:-[A-Za-z0-9_.-]+)?)(?:\.(?:csv|jsonl)(?:\.gz)?|\.manifest\.json)$/;

export const exportFileName = (base: string, format: ExportFormat, gzip: boolean): string => `${base}.${format}${gzip ? '.gz' : ''}`;
export const manifestFileName = (base: string): string => `${base}.manifest.json`;

/** The customer's value of `field` as exported: Password always empty, null as empty (CSV) or null (JSONL). */
function valueOf(customer: Customer, field: (typeof CUSTOMER_FIELDS)[number]): string | null {
  return field === 'Password' ? '' : customer[field];
}

/**
 * One CSV cell as csv-stringify writes it with `quoted` and `quoted_empty`
 * (test/export/writer.test.ts holds the two to the same bytes):
 * formula-escaped, quoted, quotes doubled. Written out here because the
 * export formats every row of every page, and csv-stringify's per-cell
 * machinery cost more than the rest of a page's handling.
 */
function csvCell(value: string): string {
  const cell = escapeFormula(value);
  return `"${cell.includes('"') ? cell.replaceAll('"', '""') : cell}"`;
}

/** The export file's first line: the CSV header, or nothing for JSONL. LF line ends; the BOM is {@link openExportFile}'s. */
export function headerOf(format: ExportFormat): string {
  return format === 'csv' ? `${CUSTOMER_FIELDS.map(csvCell).join(',')}\n` : '';
}

/** One customer as a line of the export file, its LF included. */
export function formatRow(format: ExportFormat, customer: Customer): string {
  if (format === 'csv') {
    let line = '';
    for (let i = 0; i < CUSTOMER_FIELDS.length; i++) {
      const field = CUSTOMER_FIELDS[i] ?? 'CustomerID';
      line += (i === 0 ? '' : ',') + csvCell(valueOf(customer, field) ?? '');
    }
    return `${line}\n`;
  }
  const ordered: Record<string, string | null> = {};
  for (const field of CUSTOMER_FIELDS) ordered[field] = valueOf(customer, field);
  return `${JSON.stringify(ordered)}\n`;
}

/** A page of customers as rows of the export file, with their CustomerIDs. */
export function formatPage(format: ExportFormat, customers: readonly Customer[]): PageRows {
  return { ids: customers.map((c) => c.CustomerID), rows: customers.map((c) => formatRow(format, c)) };
}

/**
 * The file's base name for an export starting at `stamp`: `customers-<stamp>`,
 * or `customers-<stamp>-<exportId>` when that name is taken, on disk or by
 * `claim` (another export starting in the same second, not yet written).
 */
export async function chooseBase(dir: string, stamp: string, exportId: string, claim: (base: string) => Promise<boolean> = async () => true): Promise<string> {
  const plain = `customers-${stamp}`;
  const taken = await readdir(dir).catch(() => [] as string[]);
  const free = !taken.some((name) => EXPORT_NAME.exec(name)?.[1] === plain) && (await claim(plain));
  return free ? plain : `${plain}-${exportId}`;
}

export interface WrittenFile {
  path: string;
  count: number;
  bytes: number;
  sha256: string;
}

/**
 * An export file being written: rows go in, in order, as they are ready; the
 * file is a temp name until `finish` renames it into place.
 */
export interface ExportFileSink {
  /** Appends rows (formatted by `formatRow`), `count` customers of them; waits while the disk is behind. */
  write(rows: Buffer | string, count: number): Promise<void>;
  /** Customers written so far. */
  readonly count: number;
  /** Ends the file, fsyncs and renames it into place. */
  finish(): Promise<WrittenFile>;
  /** Drops the file (nothing is left behind); safe more than once, and after a failure. */
  abort(): Promise<void>;
}

/** Where and how an export file is written. */
export interface ExportFileInput {
  dir: string;
  name: string;
  format: ExportFormat;
  gzip: boolean;
  /** Start a CSV file with a UTF-8 BOM, for spreadsheets. Default true; false for machine consumers. JSONL never has one. */
  bom?: boolean;
}

/** Opens `dir/name` for writing by way of a temp file, its BOM (CSV) and header row written. */
export async function openExportFile(input: ExportFileInput): Promise<ExportFileSink> {
  const { dir, gzip } = input;
  await mkdir(dir, { recursive: true });
  const target = path.join(dir, input.name);
  const temp = tempPathFor(target);
  // The hash sees exactly the bytes handed to the file, after gzip: what `sha256sum` reads back.
  const hash = createHash('sha256');
  const hashing = new PassThrough({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  // flush: the bytes are on disk before the pipeline resolves, so the rename follows them.
  const file = createWriteStream(temp, { flags: 'wx', mode: RESULT_FILE_MODE, flush: true });
  const head: Writable = gzip ? createGzip() : hashing;
  const flowing = pipeline(gzip ? [head, hashing, file] : [hashing, file]);
  let failure: { error: unknown } | undefined;
  flowing.catch((error: unknown) => {
    failure ??= { error };
  });
  let count = 0;
  let state: 'open' | 'finished' | 'aborted' = 'open';

  async function write(rows: Buffer | string, n: number): Promise<void> {
    if (failure) throw failure.error;
    if (state !== 'open') throw new Error(`export file ${target} is ${state}`);
    count += n;
    if (!head.write(rows)) await Promise.race([once(head, 'drain'), flowing]);
  }

  const header = (input.format === 'csv' && input.bom !== false ? '\uFEFF' : '') + headerOf(input.format);
  if (header !== '') await write(header, 0);
  return {
    write,
    get count() {
      return count;
    },
    async finish() {
      if (state !== 'open') throw new Error(`export file ${target} is ${state}`);
      state = 'finished';
      try {
        head.end();
        await flowing;
        const sha256 = hash.digest('hex');
        const { size } = await stat(temp);
        await rename(temp, target);
        await syncDirectory(dir);
        return { path: target, count, bytes: size, sha256 };
      } catch (error) {
        await rm(temp, { force: true });
        throw error;
      }
    },
    async abort() {
      if (state === 'aborted') return;
      const wasOpen = state === 'open';
      state = 'aborted';
      if (wasOpen) {
        head.destroy();
        await flowing.catch(() => undefined);
      }
      await rm(temp, { force: true });
    },
  };
}

/** Streams the records into `dir/name` by way of a temp file; resolves once it is renamed into place. */
export async function writeExportFile(input: ExportFileInput & { records: AsyncIterable<Customer> }): Promise<WrittenFile> {
  const sink = await openExportFile(input);
  try {
    let batch = '';
    let n = 0;
    for await (const customer of input.records) {
      batch += formatRow(input.format, customer);
      if (++n === 100) {
        await sink.write(batch, n);
        batch = '';
        n = 0;
      }
    }
    if (n > 0) await sink.write(batch, n);
    return await sink.finish();
  } catch (error) {
    await sink.abort();
    throw error;
  }
}

/** Writes the manifest beside its file (temp + rename); returns its path. */
export async function writeManifest(dir: string, base: string, manifest: ExportManifest): Promise<string> {
  const target = path.join(dir, manifestFileName(base));
  await writeFileAtomic(target, `${JSON.stringify(manifest, null, 2)}\n`, RESULT_FILE_MODE);
  return target;
}

/**
 * Keeps the newest `keep` exports of `dir` (by the stamp in their names; the
 * one being written, `current`, always counts as kept) and removes the rest,
 * data file and manifest together. Only `customers-<stamp>` files are touched.
 * Returns the names removed.
 */
export async function pruneExports(dir: string, keep: number, current: string): Promise<string[]> {
  const byBase = new Map<string, string[]>();
  for (const name of await readdir(dir)) {
    const base = EXPORT_NAME.exec(name)?.[1];
    if (base === undefined) continue;
    byBase.set(base, [...(byBase.get(base) ?? []), name]);
  }
  const older = [...byBase.keys()].filter((base) => base !== current).sort().reverse();
  const removed: string[] = [];
  for (const base of older.slice(Math.max(0, keep - 1))) {
    for (const name of byBase.get(base) ?? []) {
      await rm(path.join(dir, name), { force: true });
      removed.push(name);
    }
  }
  return removed.sort();
}
