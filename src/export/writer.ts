/**
 * The export's files (DESIGN section 5): `customers-<UTC stamp>.csv` or
 * `.jsonl`, optionally `.gz`, and `customers-<UTC stamp>.manifest.json`
 * beside it; and pruning past `--keep N`.
 *
 * - CSV: a header row of every customer field of api-interface.md 2.1,
 *   CustomerID first; every cell quoted (empty ones too) and passed through
 *   `escapeFormula` (DESIGN section 6), since people open exports in
 *   spreadsheets; UTF-8 without BOM, LF line ends. A null MobileNumber is an
 *   empty cell.
 * - JSONL: one JSON object per customer, the same fields in the same order,
 *   values as the service gave them (MobileNumber may be null); no formula
 *   escaping, since JSONL is read by programs and a `'` would change values.
 * - Password is always empty: the interface returns it empty, and a
 *   credential never belongs in an export.
 *
 * The file is streamed to a temp name in the same folder, hashed on the way
 * (sha256 of the bytes written, after gzip: what `sha256sum` shows), fsync'd
 * and renamed; the
 * manifest is written the same way after it, so a manifest always describes
 * a whole file. Files are mode 0640: they hold personal data.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough, Readable, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { stringify } from 'csv-stringify';
import { CUSTOMER_FIELDS, type Customer } from '../api/schemas/index.js';
import { escapeFormula } from '../results/formula.js';
import { RESULT_FILE_MODE, syncDirectory, tempPathFor } from '../results/writeResults.js';
import type { ExportFormat } from './request.js';

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
  /** Every page agreed with the final TotalItemCount and `count` equals it (partitioned: every search did). */
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
  /** Null when TotalItemCount held still and the pages added up at the first try. */
  drift: null | { rounds: number; reread: string; reasons: string[] };
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

const CSV_OPTIONS = {
  bom: false,
  record_delimiter: 'unix',
  // Every cell quoted, empty ones too, so a spreadsheet never guesses a type.
  quoted: true,
  quoted_empty: true,
  // escapeFormula covers LF and NUL, which csv-stringify's own escaping misses.
  escape_formulas: false,
  eof: true,
} as const;

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

/** Streams the records into `dir/name` by way of a temp file; resolves once it is renamed into place. */
export async function writeExportFile(input: { dir: string; name: string; format: ExportFormat; gzip: boolean; records: AsyncIterable<Customer> }): Promise<WrittenFile> {
  const { dir, format, gzip } = input;
  await mkdir(dir, { recursive: true });
  const target = path.join(dir, input.name);
  const temp = tempPathFor(target);
  let count = 0;
  async function* lines(): AsyncGenerator<string | string[]> {
    if (format === 'csv') yield [...CUSTOMER_FIELDS];
    for await (const customer of input.records) {
      count++;
      if (format === 'csv') {
        yield CUSTOMER_FIELDS.map((field) => escapeFormula(valueOf(customer, field) ?? ''));
      } else {
        yield `${JSON.stringify(Object.fromEntries(CUSTOMER_FIELDS.map((field) => [field, valueOf(customer, field)])))}\n`;
      }
    }
  }
  const stages: Transform[] = [];
  if (format === 'csv') stages.push(stringify(CSV_OPTIONS));
  if (gzip) stages.push(createGzip());
  // The hash sees exactly the bytes handed to the file, after gzip: what `sha256sum` reads back.
  const hash = createHash('sha256');
  const hashing = new PassThrough({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  try {
    // flush: the bytes are on disk before the pipeline resolves, so the rename follows them.
    await pipeline([Readable.from(lines()), ...stages, hashing, createWriteStream(temp, { flags: 'wx', mode: RESULT_FILE_MODE, flush: true })]);
    const sha256 = hash.digest('hex');
    const { size } = await stat(temp);
    await rename(temp, target);
    await syncDirectory(dir);
    return { path: target, count, bytes: size, sha256 };
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

/** Writes the manifest beside its file (temp + rename); returns its path. */
export async function writeManifest(dir: string, base: string, manifest: ExportManifest): Promise<string> {
  const target = path.join(dir, manifestFileName(base));
  const temp = tempPathFor(target);
  try {
    await writeFile(temp, `${JSON.stringify(manifest, null, 2)}\n`, { encoding: 'utf8', flag: 'wx', mode: RESULT_FILE_MODE, flush: true });
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  await syncDirectory(dir);
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
