/**
 * The three result files of a settled import, written into
 * `results/<importId>/`:
 * - `results.csv`: every input row in input order, its own columns then
 *   `_row,_status,_customerId,_subscriptionId,_paymentMethodKey,_attempts,_error`;
 * - `errors.csv`: only the invalid, failed and needs-review rows, in the
 *   input's own columns plus `_error`, so an operator can fix the file and
 *   drop it back into the inbox;
 * - `summary.json`: the import's counts, times and API figures;
 * - `unprocessed.csv`, only when rows were cancelled: those rows in the
 *   input's own header and columns and nothing else, to import again. A
 *   card number and a CVC are never written to a file, so their cells are
 *   empty there (the importer refuses such a row until they are filled in),
 *   and a password is `********` as in errors.csv.
 *
 * Rows are streamed from an async iterable: memory stays flat however large
 * the import. Each file goes to a temp file in the same directory
 * (`.<name>.<random>.tmp`), is fsync'd, then renamed over its final name, so
 * a reader never sees half a file. `summary.json` is removed first and
 * renamed last: when it exists, the three files belong to the same run.
 *
 * CSV dialect: UTF-8 with a BOM (so that a spreadsheet opens the file as
 * UTF-8: without one Excel reads it as the machine's legacy encoding and
 * shows `Ã«` for `ë`; `bom: false` for machine consumers), LF line ends, a
 * header row, fields quoted only when RFC 4180 needs it (a comma, a quote, CR
 * or LF inside).
 *
 * Every cell but the header's is formula-escaped (see formula.ts): operators
 * are told to open errors.csv in a spreadsheet, and a cell such as
 * `=HYPERLINK(…)` must stay text there. The importer undoes exactly that
 * escape (src/csv/text.ts), so both files import again to the values the
 * operator wrote, a +33 phone number included; but for card data and
 * passwords, which are never written: a card number masked to its last four,
 * a CVC empty, a password as `********` (which the importer refuses, rule
 * `password-withheld`, rather than send). `_error` comes scrubbed of card
 * data (src/import/finalize.ts).
 */
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { maskCardNumber } from '../api/rules.js';
import { escapeFormula } from './formula.js';
import { PASSWORD_MASK } from '../secrets.js';
import { PROBLEM_STATUSES, STOPPED_STATUSES, type ImportKind, type RowStatus } from '../outcomes.js';
import { syncDirectory, tempPathFor } from '../files.js';
import { wholeTurn } from '../slices.js';

/** One settled row, as the finaliser reads it from the import's ledger. */
export interface ResultRow {
  /** The row number in the input file (1 = the first data row). */
  row: number;
  /** The input row's cells, in the input's column order, card fields already masked upstream. */
  cells: string[];
  status: RowStatus;
  /** Empty when the row has none (never sent, or refused). */
  customerId: string;
  subscriptionId: string;
  paymentMethodKey: string;
  /** API attempts made for the row (0 for an invalid row). */
  attempts: number;
  /** Why the row did not succeed: the column and rule, or the API's words; empty on success. */
  error: string;
}

export interface ImportSummary extends ApiFigures {
  importId: string;
  /** The input file's name as the operator gave it. */
  file: string;
  kind: ImportKind;
  rows: number;
  counts: Record<RowStatus, number>;
  /** ISO 8601 UTC. */
  startedAt: string;
  endedAt: string;
  durationMs: number;
  rowsPerSecond: number;
}

/** An import's API figures as the summary and its status report them. */
export interface ApiFigures {
  apiCalls: number;
  /** Of apiCalls: searches of customers, reads of one record, and writes (creates, updates, sign-ups). */
  searches: number;
  reads: number;
  writes: number;
  retries: number;
  /** Answers with status 429. */
  rateLimited: number;
}

/** The figures from an import's counts: the writes are the calls that were neither searches nor reads. */
export function apiFiguresOf(counts: Omit<ApiFigures, 'writes'>): ApiFigures {
  return {
    apiCalls: counts.apiCalls,
    searches: counts.searches,
    reads: counts.reads,
    writes: counts.apiCalls - counts.searches - counts.reads,
    retries: counts.retries,
    rateLimited: counts.rateLimited,
  };
}

/** Where the files were written (absolute when `dir` is). */
export interface ResultFiles {
  dir: string;
  results: string;
  errors: string;
  summary: string;
  /** unprocessed.csv, when the input said rows were cancelled. */
  unprocessed?: string;
}

/** Input column indexes (0-based) holding card data, masked again on the way out. */
export interface SecretColumns {
  /** AccountNumber columns: masked to the last four digits when a cell holds more than four digits. */
  cardNumber: readonly number[];
  /** CVCode columns: always emptied. */
  cvc: readonly number[];
  /** A customers file's Password column: a non-empty cell written as PASSWORD_MASK (src/secrets.ts). */
  password?: readonly number[];
}

export interface WriteImportResultsInput {
  /** The import's results directory, created if missing. */
  dir: string;
  /** The input file's header row, as the operator wrote it (before any `--map`), so errors.csv imports again the same way. */
  headers: readonly string[];
  secretColumns: SecretColumns;
  /** Every row of the import, in input order. Consumed once. */
  rows: AsyncIterable<ResultRow>;
  summary: ImportSummary;
  /** Start both CSV files with a UTF-8 BOM, for spreadsheets. Default true; false for machine consumers. */
  bom?: boolean;
  /** Some rows were cancelled: write them to unprocessed.csv too (else any earlier one is removed). */
  unprocessed?: boolean;
}

/** The UTF-8 byte order mark: how a spreadsheet knows a CSV file is UTF-8. */
export const UTF8_BOM = '\uFEFF';

/** The outcome columns appended to results.csv, in order. */
export const RESULT_COLUMNS = ['_row', '_status', '_customerId', '_subscriptionId', '_paymentMethodKey', '_attempts', '_error'] as const;
/** The one outcome column appended to errors.csv. */
export const ERROR_COLUMN = '_error';
export const RESULT_FILE_NAMES = { results: 'results.csv', errors: 'errors.csv', summary: 'summary.json', unprocessed: 'unprocessed.csv' } as const;
/**
 * Owner read/write, group read: the files hold customers' personal data (names,
 * emails, addresses), so not world-readable; the group lets an operators' group
 * read them without running as the worker's user.
 */
export const RESULT_FILE_MODE = 0o640;

/**
 * One CSV record, its LF included, as csv-stringify writes it with
 * `quoted: false` and LF record ends (test/results/writeResults.test.ts holds
 * the two to the same bytes): a cell is quoted only when it holds a comma, a
 * quote, CR or LF, quotes doubled. Written out here because csv-stringify's
 * stream machinery per record cost more than reading the ledger.
 */
export function csvRecord(cells: readonly string[]): string {
  return `${csvCells(cells)}\n`;
}

/** The cells of a record joined as {@link csvRecord} writes them, without the record's end. */
function csvCells(cells: readonly string[]): string {
  let line = '';
  for (let i = 0; i < cells.length; i++) line += i === 0 ? csvCell(cells[i] ?? '') : `,${csvCell(cells[i] ?? '')}`;
  return line;
}

/** One cell as a CSV field: quoted only when it holds a comma, a quote, CR or LF, its quotes doubled. */
function csvCell(cell: string): string {
  return NEEDS_QUOTES.test(cell) ? `"${cell.replaceAll('"', '""')}"` : cell;
}
const NEEDS_QUOTES = /[",\r\n]/;

/** Bytes gathered before a write to a result file: big writes, few of them. */
const WRITE_CHUNK_BYTES = 64 * 1024;

/**
 * Writes results.csv, errors.csv and summary.json for one import. Resolves
 * once all three are in place; on any failure (including the rows iterable
 * throwing) removes its temp files, leaves earlier result files untouched,
 * and rejects with the original error.
 */
export async function writeImportResults(input: WriteImportResultsInput): Promise<ResultFiles> {
  const { dir, headers, secretColumns, summary } = input;
  checkSecretColumns(secretColumns, headers.length);
  await mkdir(dir, { recursive: true });

  const files: ResultFiles = {
    dir,
    results: path.join(dir, RESULT_FILE_NAMES.results),
    errors: path.join(dir, RESULT_FILE_NAMES.errors),
    summary: path.join(dir, RESULT_FILE_NAMES.summary),
  };
  const unprocessed = path.join(dir, RESULT_FILE_NAMES.unprocessed);
  const temps = { results: tempPathFor(files.results), errors: tempPathFor(files.errors), summary: tempPathFor(files.summary), ...(input.unprocessed ? { unprocessed: tempPathFor(unprocessed) } : {}) };

  try {
    await writeCsvFiles(temps.results, temps.errors, temps.unprocessed, input);
    await writeFile(temps.summary, `${JSON.stringify(summary, null, 2)}\n`, {
      encoding: 'utf8',
      flag: 'wx',
      mode: RESULT_FILE_MODE,
      flush: true,
    });
    // summary.json goes first and comes back last: while it exists, the
    // results and errors beside it are the ones it describes.
    await rm(files.summary, { force: true });
    await rename(temps.results, files.results);
    await rename(temps.errors, files.errors);
    if (temps.unprocessed) await rename(temps.unprocessed, unprocessed);
    else await rm(unprocessed, { force: true });
    await rename(temps.summary, files.summary);
  } catch (error) {
    await Promise.all(Object.values(temps).map((temp) => rm(temp, { force: true })));
    throw error;
  }
  await syncDirectory(dir);
  return temps.unprocessed ? { ...files, unprocessed } : files;
}

/** Writes both CSV files in one pass over the rows, in chunks, honouring each file's backpressure. */
async function writeCsvFiles(resultsPath: string, errorsPath: string, unprocessedPath: string | undefined, input: WriteImportResultsInput): Promise<void> {
  const { headers, secretColumns, rows } = input;
  // flush: true fsyncs each file before it closes, so the writes end only
  // once the bytes are on disk and the rename can follow.
  const results = new ChunkedFile(createWriteStream(resultsPath, { flags: 'wx', mode: RESULT_FILE_MODE, flush: true }));
  const errors = new ChunkedFile(createWriteStream(errorsPath, { flags: 'wx', mode: RESULT_FILE_MODE, flush: true }));
  const unprocessed = unprocessedPath === undefined ? undefined : new ChunkedFile(createWriteStream(unprocessedPath, { flags: 'wx', mode: RESULT_FILE_MODE, flush: true }));
  // unprocessed.csv holds no card data at all, not even masked: its rows are to be sent again.
  const unsent: SecretColumns = { cardNumber: [], cvc: [...secretColumns.cardNumber, ...secretColumns.cvc], password: secretColumns.password };
  const files = unprocessed ? [results, errors, unprocessed] : [results, errors];
  try {
    const bom = input.bom === false ? '' : UTF8_BOM;
    results.add(bom + csvRecord([...headers, ...RESULT_COLUMNS]));
    errors.add(bom + csvRecord([...headers, ERROR_COLUMN]));
    unprocessed?.add(bom + csvRecord(headers));
    // Per row: the input cells joined once for both files, and a file written out only when a chunk is full.
    for await (const row of rows) {
      const cells = csvCells(outputCells(row.cells, headers.length, secretColumns));
      const error = csvCell(escapeFormula(row.error));
      const ids = `${csvCell(row.customerId)},${csvCell(row.subscriptionId)},${csvCell(row.paymentMethodKey)}`;
      let full = results.add(`${cells},${row.row},${row.status},${ids},${row.attempts},${error}\n`);
      if (PROBLEM_STATUSES.has(row.status)) full = errors.add(`${cells},${error}\n`) || full;
      if (unprocessed && STOPPED_STATUSES.has(row.status)) full = unprocessed.add(csvRecord(outputCells(row.cells, headers.length, unsent))) || full;
      if (full) await Promise.all(files.map((file) => file.flushIfFull()));
    }
    await Promise.all(files.map((file) => file.close()));
  } catch (error) {
    // The file streams are closed before the caller removes the temp files.
    await Promise.all(files.map((file) => file.destroy()));
    throw error;
  }
}

/**
 * A file written in chunks of about WRITE_CHUNK_BYTES, waiting for 'drain'
 * when its stream's buffer is full. Each record is turned into UTF-8 bytes
 * as it is added, while its text is new, rather than gathered as text over
 * hundreds of records and turned into bytes at the write: in a worker, a
 * 20,000-row import's files took a fifth less time so (228 ms against 284
 * on average, twelve imports each).
 */
class ChunkedFile {
  private chunk = Buffer.allocUnsafe(WRITE_CHUNK_BYTES);
  private used = 0;
  /** Chunks filled and not yet written. */
  private readonly full: Buffer[] = [];

  constructor(private readonly stream: Writable) {
    // Told by the next add or close; never an unhandled 'error' meanwhile.
    stream.on('error', () => undefined);
  }

  /** Adds `text`; true when a chunk is full and {@link flushIfFull} should be awaited. */
  add(text: string): boolean {
    // At most 3 bytes per UTF-16 code unit: a text that may not fit starts a new chunk (as big as it needs).
    if (this.used + text.length * 3 > this.chunk.length) {
      this.seal();
      this.chunk = Buffer.allocUnsafe(Math.max(WRITE_CHUNK_BYTES, text.length * 3));
    }
    this.used += this.chunk.write(text, this.used);
    return this.full.length > 0;
  }

  async flushIfFull(): Promise<void> {
    if (this.full.length > 0) await this.flush(false);
  }

  async close(): Promise<void> {
    await this.flush(true);
    this.stream.end();
    await finished(this.stream);
  }

  async destroy(): Promise<void> {
    this.stream.destroy();
    await finished(this.stream).catch(() => undefined);
  }

  /** The chunk being filled joins the full ones (when it holds anything); the next text starts a new one. */
  private seal(): void {
    if (this.used > 0) this.full.push(this.chunk.subarray(0, this.used));
    this.used = 0;
  }

  /** Writes the full chunks, and with `all` the one being filled. */
  private async flush(all: boolean): Promise<void> {
    if (this.stream.destroyed) throw this.stream.errored ?? new Error('result file stream closed before the rows were written');
    if (all) {
      this.seal();
      // Written out: a text added after starts a chunk of its own.
      this.chunk = Buffer.alloc(0);
    }
    const chunks = this.full.splice(0);
    let room = true;
    for (const chunk of chunks) room = this.stream.write(chunk);
    if (!room) await drained(this.stream);
    // The rows come from resolved promises: without a turn of the event loop here, a worker's
    // requests and settles for other imports would wait for the whole file, and its paced
    // requests' timers for the next chunk.
    await wholeTurn();
  }
}

/**
 * The cells as written: fitted to the header count (a short row padded with
 * empty cells, extra cells dropped) so the outcome columns always line up,
 * card data and passwords masked again as defence in depth, and each cell
 * escaped against formulas (src/results/formula.ts).
 */
function outputCells(cells: readonly string[], width: number, secretColumns: SecretColumns): string[] {
  const out = new Array<string>(width);
  for (let index = 0; index < width; index++) out[index] = cells[index] ?? '';
  for (const index of secretColumns.cardNumber) {
    const cell = out[index];
    if (cell !== undefined && cell.replace(/\D/g, '').length > 4) out[index] = maskCardNumber(cell);
  }
  for (const index of secretColumns.cvc) out[index] = '';
  for (const index of secretColumns.password ?? []) if (out[index] !== '') out[index] = PASSWORD_MASK;
  for (let index = 0; index < width; index++) out[index] = escapeFormula(out[index] as string);
  return out;
}

function checkSecretColumns(secretColumns: SecretColumns, width: number): void {
  for (const index of [...secretColumns.cardNumber, ...secretColumns.cvc, ...(secretColumns.password ?? [])]) {
    if (!Number.isInteger(index) || index < 0 || index >= width) {
      throw new RangeError(`secret column index ${index} is outside the ${width} input columns`);
    }
  }
}

/** Resolves on 'drain'; rejects if the stream errors or closes first (a destroyed stream never drains). */
function drained(stream: Writable): Promise<void> {
  return new Promise((resolve, reject) => {
    const settle = (error?: Error): void => {
      stream.off('drain', onDrain);
      stream.off('error', onError);
      stream.off('close', onClose);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onDrain = (): void => settle();
    const onError = (error: Error): void => settle(error);
    const onClose = (): void => settle(stream.errored ?? new Error('result file stream closed before the rows were written'));
    stream.on('drain', onDrain);
    stream.on('error', onError);
    stream.on('close', onClose);
  });
}
