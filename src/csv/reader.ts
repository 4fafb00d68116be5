/**
 * Streaming CSV reader: UTF-8 (with or without BOM), RFC 4180 quoting (quoted
 * commas, doubled quotes, line breaks inside quotes), CRLF, LF or CR line
 * endings, even mixed. Records come one at a time from csv-parse with
 * backpressure, so memory does not grow with the file: only the read stream's
 * buffer and a few parsed records are held at once.
 *
 * What the reader decides (and validation relies on):
 * - The first record is the header; `row` 1 is the first record after it.
 * - Empty lines, and records whose every cell is blank (spreadsheets append
 *   `,,,,` lines), are not rows: they are skipped and do not take a row number.
 * - A record with more or fewer cells than the header is yielded as it is
 *   (`relax_column_count`); validation reports it (rule `column-count`).
 * - Anything csv-parse cannot read (an unclosed or stray quote, a record over
 *   {@link MAX_RECORD_CHARS}) and bytes that are not UTF-8 stop the read with
 *   a CsvFormatError naming the line where the failing record starts. It is a
 *   fault of the whole file: it may come from `openCsv` or from the rows (the
 *   parser reads ahead, so rows just before the fault may not be yielded).
 */
import { createReadStream } from 'node:fs';
import { pipeline } from 'node:stream';
import { CsvError, parse } from 'csv-parse';
import { CsvFormatError, FileRejectedError } from './errors.js';

/** One data record of a CSV file. */
export interface CsvRow {
  /** 1 = the first data record after the header; blank records take no number. */
  row: number;
  /** The line of the file where the record starts (1-based; the header is on line 1 or later). */
  line: number;
  /** The cells as written (not trimmed); as many as the record has, which may differ from the header. */
  cells: string[];
}

/** An open CSV file: its header, and its rows to be read once, in order. */
export interface CsvFile {
  /** The header record, cells as written. */
  readonly headers: string[];
  /** The data records; iterate once. Breaking out of the loop closes the file. */
  readonly rows: AsyncIterable<CsvRow>;
  /** Bytes read from disk so far (for progress; always ahead of the rows yielded). */
  readonly bytesRead: number;
  /** Stops reading and releases the file; safe to call more than once. */
  close(): void;
}

/**
 * The largest record csv-parse will assemble, in characters. Guards memory
 * against an unclosed quote early in a large file, which would otherwise
 * swallow the rest of the file into one cell.
 */
export const MAX_RECORD_CHARS = 1024 * 1024;

/** Line breaks as they count for line numbers: CRLF is one. */
const LINE_BREAK = /\r\n|\r|\n/g;

/** What the decoder produces for bytes that are not UTF-8. */
const REPLACEMENT_CHARACTER = '\uFFFD';

/**
 * Opens `file` and reads its header record. Rejects with FileRejectedError when
 * the file has no header (it is empty), CsvFormatError when the header cannot
 * be parsed, or the file system's error (ENOENT, EACCES) as it is.
 */
export async function openCsv(file: string): Promise<CsvFile> {
  // Line numbers are counted here, as each record is parsed (csv-parse's own
  // `lines` counts a CRLF inside quotes twice): a record starts one line after
  // the lines the records before it took, plus the empty lines csv-parse skipped.
  let linesTaken = 0;
  // The starting lines of the records parsed but not yet consumed, in order:
  // the parser reads ahead of the consumer by at most a read chunk.
  const pendingLines: number[] = [];
  let headerSeen = false;
  const onRecord = (cells: string[], context: { empty_lines: number }): string[] | null => {
    const line = 1 + linesTaken + context.empty_lines;
    linesTaken += 1 + cells.reduce((sum, cell) => sum + countLineBreaks(cell), 0);
    if (cells.some((cell) => cell.includes(REPLACEMENT_CHARACTER))) {
      throw new CsvFormatError(
        file,
        line,
        'the file is not UTF-8 (it holds bytes that are not UTF-8 text); save it as "CSV UTF-8" and drop it in again',
      );
    }
    if (headerSeen && cells.every((cell) => cell.trim() === '')) return null;
    headerSeen = true;
    pendingLines.push(line);
    return cells;
  };

  const input = createReadStream(file);
  const parser = parse({
    bom: true,
    // No `columns`: records stay arrays, the header is data to check, not keys to trust.
    relax_column_count: true,
    skip_empty_lines: true,
    // Any of the three, even mixed in one file (csv-parse would otherwise
    // settle on the first one it sees).
    record_delimiter: ['\r\n', '\n', '\r'],
    max_record_size: MAX_RECORD_CHARS,
    on_record: onRecord,
  });
  // pipeline forwards a read error (ENOENT) into the parser, so it surfaces
  // from the iterator below; the callback has nothing left to do.
  pipeline(input, parser, () => {});
  const records = parser[Symbol.asyncIterator]();

  let closed = false;
  const close = (): void => {
    if (closed) return;
    closed = true;
    input.destroy();
    parser.destroy();
  };

  /** The next record with its starting line, or undefined at the end of the file. */
  const nextRecord = async (): Promise<{ cells: string[]; line: number } | undefined> => {
    let result: IteratorResult<unknown>;
    try {
      result = await records.next();
    } catch (err) {
      close();
      if (err instanceof CsvError) {
        // The record being parsed starts after every record parsed so far
        // (the consumer may not have seen them all yet: the parser reads ahead).
        const skipped = typeof err['empty_lines'] === 'number' ? err['empty_lines'] : 0;
        throw new CsvFormatError(file, 1 + linesTaken + skipped, err.message, { cause: err });
      }
      throw err;
    }
    if (result.done === true) return undefined;
    return { cells: asCells(result.value), line: pendingLines.shift() ?? 0 };
  };

  const header = await nextRecord();
  if (header === undefined) {
    close();
    throw new FileRejectedError(file, ['the file is empty: no header row']);
  }

  async function* readRows(): AsyncGenerator<CsvRow> {
    let row = 0;
    try {
      for (;;) {
        const record = await nextRecord();
        if (record === undefined) return;
        row += 1;
        yield { row, line: record.line, cells: record.cells };
      }
    } finally {
      close();
    }
  }

  return {
    headers: header.cells,
    rows: readRows(),
    get bytesRead() {
      return input.bytesRead;
    },
    close,
  };
}

/** Reads only the header record of `file` (kind detection, dry runs), then closes it. */
export async function readHeaders(file: string): Promise<string[]> {
  const csv = await openCsv(file);
  csv.close();
  return csv.headers;
}

/** What the parser's iterator yields is typed `any`: checked, not trusted. */
function asCells(record: unknown): string[] {
  if (Array.isArray(record) && record.every((cell) => typeof cell === 'string')) return record;
  throw new TypeError('csv-parse produced a record that is not an array of strings');
}

function countLineBreaks(text: string): number {
  if (!text.includes('\n') && !text.includes('\r')) return 0;
  return text.match(LINE_BREAK)?.length ?? 0;
}
