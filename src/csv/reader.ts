/**
 * Streaming CSV reader: RFC 4180 quoting (quoted delimiters, doubled quotes,
 * line breaks inside quotes), CRLF, LF or CR line endings, even mixed. Records
 * come one at a time from csv-parse with backpressure, so memory does not grow
 * with the file: only the read stream's buffer and a few parsed records are
 * held at once.
 *
 * What the reader decides (and validation relies on):
 * - Encoding, delimiter and header line come from the first bytes (see
 *   src/csv/sniff.ts): UTF-8 with or without BOM, UTF-16 with a BOM, or the
 *   encoding named by `encoding` (`--encoding`); a comma, or `;` or a tab when
 *   the header shows it beyond doubt, or the `sep=X` of a first line; lines
 *   above a header that follows beyond doubt skipped when each is one cell.
 * - The first record read is the header; `row` 1 is the first record after it.
 * - Empty lines, and records whose every cell is blank (spreadsheets append
 *   `,,,,` lines), are not rows: they are skipped and do not take a row number
 *   (but they take a spreadsheet row: `sheetRow` counts them).
 * - A record with more or fewer cells than the header is yielded as it is
 *   (`relax_column_count`); validation reports it (rule `column-count`).
 * - Anything csv-parse cannot read (an unclosed or stray quote, a record over
 *   {@link MAX_RECORD_CHARS}), bytes that are not UTF-8, and UTF-8 that is
 *   surely another encoding read by chance stop the read with a CsvFormatError
 *   naming the line. Its reason says where and what kind of character, never
 *   a cell's content (a card number must not reach a log or the inbox's error
 *   file). It is a fault of the whole file: it may come from `openCsv` or from
 *   the rows (the parser reads ahead, so rows just before the fault may not be
 *   yielded).
 */
import fs, { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { isUtf8 } from 'node:buffer';
import { Transform, pipeline, type TransformCallback } from 'node:stream';
import { CsvError, Parser, type Options } from 'csv-parse';
import { cleanHeader, isKnownHeader, type ColumnMap } from './columns.js';
import { CsvFormatError, FileRejectedError } from './errors.js';
import { chooseEncoding, codePointName, decodeAll, firstInvalidUtf8, legacyProblem, legacyReadAsUtf8, placeHeader, type HeaderPlace } from './sniff.js';

/** One data record of a CSV file. */
export interface CsvRow {
  /** 1 = the first data record after the header; blank records take no number. */
  row: number;
  /** The line of the file where the record starts (1-based; the header is on line 1 or later). */
  line: number;
  /**
   * The row a spreadsheet shows the record on: the header is row 1 (or lower
   * when title lines stand above it), blank lines and blank records count.
   * Absent for a row that does not come from a file (an edited row).
   */
  sheetRow?: number;
  /** The cells as written (not trimmed); as many as the record has, which may differ from the header. */
  cells: string[];
}

/** An open CSV file: its header, and its rows to be read once, in order. */
export interface CsvFile {
  /** The header record, cells as written. */
  readonly headers: string[];
  /** The data records; iterate once. Breaking out of the loop closes the file. */
  readonly rows: AsyncIterable<CsvRow>;
  /**
   * The same rows in runs, each as many as were parsed when it was asked
   * for (at least one): what a reader of every row takes, without a promise
   * per row. Iterate `rows` or `batches`, not both.
   */
  readonly batches: AsyncIterable<CsvRow[]>;
  /** Bytes read from disk so far (for progress; always ahead of the rows yielded). */
  readonly bytesRead: number;
  /** The delimiter the file is read with. */
  readonly delimiter: string;
  /** The encoding the file is read in (a TextDecoder label). */
  readonly encoding: string;
  /** Stops reading and releases the file; safe to call more than once. */
  close(): void;
}

export interface ReadOptions {
  /** `--encoding NAME`: read the file in this encoding (a TextDecoder label), whatever its bytes suggest. */
  encoding?: string;
  /** `--map FILE`: its keys count as known columns when the delimiter and the header line are decided. */
  map?: ColumnMap;
}

/**
 * The largest record csv-parse will assemble, in characters. Guards memory
 * against an unclosed quote early in a large file, which would otherwise
 * swallow the rest of the file into one cell.
 */
export const MAX_RECORD_CHARS = 1024 * 1024;

/** Bytes looked at before reading: the encoding, the delimiter and the header line are decided on them. */
const HEAD_BYTES = 64 * 1024;

/** Line breaks as they count for line numbers: CRLF is one. */
const LINE_BREAK = /\r\n|\r|\n/g;

/**
 * Opens `file` and reads its header record. Rejects with FileRejectedError when
 * the file has no header (it is empty) or its delimiter or header line is in
 * doubt, CsvFormatError when it is not in a readable encoding or the header
 * cannot be parsed, or the file system's error (ENOENT, EACCES) as it is.
 */
export async function openCsv(file: string, options: ReadOptions = {}): Promise<CsvFile> {
  const start = await startOf(file, options);
  // Line numbers are counted here, as each record is parsed (csv-parse's own
  // `lines` counts a CRLF inside quotes twice): a record starts one line after
  // the lines the records before it took, plus the empty lines csv-parse skipped.
  let linesTaken = start.place.skipLines;
  // Records parsed so far, blank ones included: a spreadsheet shows each on a row.
  let recordsSeen = 0;
  const sheetOffset = start.place.skipLines - (start.place.sepLine ? 1 : 0);
  let headerSeen = false;
  let headerCells: string[] = [];
  let row = 0;
  /** A parsed record as the row it is (the header as row 0), or null for a blank record, which is no row. */
  const onRecord = (cells: string[], emptyLines: number): CsvRow | null => {
    const line = 1 + linesTaken + emptyLines;
    const sheetRow = 1 + sheetOffset + recordsSeen + emptyLines;
    recordsSeen += 1;
    // One pass over the cells: line breaks inside them, whether all are blank, text misread from another encoding.
    let breaks = 0;
    let blank = true;
    let misread: string | undefined;
    for (const cell of cells) {
      if (typeof cell !== 'string') throw new TypeError('csv-parse produced a record that is not an array of strings');
      breaks += countLineBreaks(cell);
      if (blank && cell.trim() !== '') blank = false;
      if (!start.encoding.declared && misread === undefined) misread = legacyReadAsUtf8(cell);
    }
    linesTaken += 1 + breaks;
    if (misread !== undefined) throw new CsvFormatError(file, line, misreadReason(misread));
    if (headerSeen && blank) return null;
    // Kept here, not when the header is consumed: a parse error in a small file surfaces before that.
    if (!headerSeen) headerCells = cells;
    else row += 1;
    headerSeen = true;
    return { row, line, sheetRow, cells };
  };

  const input = createReadStream(file, { fs: firstReadsCapped() });
  const decoder = new Decoder(file, start);
  const parser = new RowParser(
    {
      // No `columns`: records stay arrays, the header is data to check, not keys to trust.
      relax_column_count: true,
      skip_empty_lines: true,
      delimiter: start.place.delimiter,
      // Any of the three, even mixed in one file (csv-parse would otherwise
      // settle on the first one it sees).
      record_delimiter: ['\r\n', '\n', '\r'],
      max_record_size: MAX_RECORD_CHARS,
    },
    onRecord,
  );
  // pipeline forwards a read or decoding error into the parser, so it surfaces
  // from the iterator below; the callback has nothing left to do.
  pipeline(input, decoder, parser, () => {});
  const records = parser[Symbol.asyncIterator]();

  let closed = false;
  const close = (): void => {
    if (closed) return;
    closed = true;
    input.destroy();
    decoder.destroy();
    parser.destroy();
  };

  /** The next record (the header first), or undefined at the end of the file. */
  const nextRecord = async (): Promise<CsvRow | undefined> => {
    let result: IteratorResult<CsvRow>;
    try {
      result = await records.next();
    } catch (err) {
      close();
      if (err instanceof CsvError) {
        // The record being parsed starts after every record parsed so far
        // (the consumer may not have seen them all yet: the parser reads ahead).
        const skipped = typeof err['empty_lines'] === 'number' ? err['empty_lines'] : 0;
        const line = 1 + linesTaken + skipped;
        throw new CsvFormatError(file, line, parseErrorReason(err, line, headerCells, start.place.delimiter, decoder.recentText()), { cause: err });
      }
      throw decoder.failure ?? err;
    }
    return result.done === true ? undefined : result.value;
  };

  const header = await nextRecord();
  if (header === undefined) {
    close();
    throw new FileRejectedError(file, ['the file is empty: no header row']);
  }

  async function* readBatches(): AsyncGenerator<CsvRow[]> {
    try {
      for (;;) {
        const first = await nextRecord();
        if (first === undefined) return;
        const batch = [first];
        // The rows parsed already wait in the parser: taken at once. None after a failure (the read ends there, as the iterator's does).
        for (let next = readParsed(); next !== null; next = readParsed()) batch.push(next);
        yield batch;
      }
    } finally {
      close();
    }
  }
  const readParsed = (): CsvRow | null => (parser.destroyed ? null : (parser.read() as CsvRow | null));

  async function* readRows(): AsyncGenerator<CsvRow> {
    try {
      for (;;) {
        const record = await nextRecord();
        if (record === undefined) return;
        yield record;
      }
    } finally {
      close();
    }
  }

  return {
    headers: header.cells,
    rows: readRows(),
    batches: readBatches(),
    get bytesRead() {
      return input.bytesRead;
    },
    delimiter: start.place.delimiter,
    encoding: start.encoding.encoding,
    close,
  };
}

/**
 * The first reads of the file are this small, the later ones the stream's
 * default 64 KiB. The parser turns a whole read into records at once, on
 * the event loop: small reads at first let a fresh process (its code not
 * yet compiled) hand on its first rows and queue its first batch that much
 * sooner, without a 64 KiB parse holding back the batch's Redis replies.
 * Every read that small would cost a whole file's parse more (about 8%
 * more CPU on 200,000 rows).
 */
const FIRST_READ_BYTES = 16 * 1024;
const FIRST_READS = 8;

/** The stream's file calls, its first FIRST_READS reads capped at FIRST_READ_BYTES. */
function firstReadsCapped(): { open: typeof fs.open; close: typeof fs.close; read: typeof fs.read } {
  let reads = 0;
  const read = (fd: number, buffer: NodeJS.ArrayBufferView, offset: number, length: number, position: fs.ReadPosition | null, callback: (error: NodeJS.ErrnoException | null, bytesRead: number, buffer: NodeJS.ArrayBufferView) => void): void => {
    const capped = reads++ < FIRST_READS ? Math.min(length, FIRST_READ_BYTES) : length;
    fs.read(fd, buffer, offset, capped, position, callback);
  };
  return { open: fs.open, close: fs.close, read: read as typeof fs.read };
}

/** Reads only the header record of `file` (kind detection, dry runs), then closes it. */
export async function readHeaders(file: string, options: ReadOptions = {}): Promise<string[]> {
  const csv = await openCsv(file, options);
  csv.close();
  return csv.headers;
}

/** What the first bytes decided. */
interface FileStart {
  encoding: { encoding: string; bomBytes: number; declared: boolean };
  place: HeaderPlace;
  /** What to drop before the header (a BOM, lines above it): bytes when the file is UTF-8, decoded characters otherwise. */
  skip: number;
}

/** Reads the first bytes of `file` and decides its encoding, delimiter and header line, or refuses it. */
async function startOf(file: string, options: ReadOptions): Promise<FileStart> {
  const handle = await open(file, 'r');
  let head: Buffer;
  let complete: boolean;
  try {
    const buffer = Buffer.alloc(HEAD_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, HEAD_BYTES, 0);
    head = buffer.subarray(0, bytesRead);
    complete = bytesRead < HEAD_BYTES;
  } finally {
    await handle.close();
  }
  const encoding = chooseEncoding(head, options.encoding);
  if ('problem' in encoding) throw new CsvFormatError(file, encoding.line, encoding.problem);
  const rest = head.subarray(encoding.bomBytes);
  // Streaming mode for a cut head (a character may continue in the next bytes); decodeAll for a whole file.
  const text = complete ? decodeAll(encoding.encoding, rest) : new TextDecoder(encoding.encoding).decode(rest, { stream: true });
  const map = options.map;
  const mapKeys = new Set(Object.keys(map ?? {}).map(cleanHeader));
  const place = placeHeader(text, complete, (cell) => mapKeys.has(cleanHeader(cell)) || isKnownHeader(cell));
  if ('problem' in place) throw new FileRejectedError(file, [place.problem]);
  // UTF-8 passes through as bytes; any other encoding is dropped from once decoded (its decoder drops its BOM).
  const skip = encoding.encoding === 'utf-8' ? encoding.bomBytes + Buffer.byteLength(text.slice(0, place.skipChars)) : place.skipChars;
  return { encoding, place, skip };
}

/**
 * Bytes to UTF-8 for csv-parse. UTF-8 passes through, checked: the first byte
 * that is not UTF-8 stops the read with the line it is on and the likely
 * encoding. Any other encoding is decoded. The lines above the header and a
 * BOM are dropped here.
 */
class Decoder extends Transform {
  /** Set when the bytes are refused; the parser's error is this one. */
  failure: CsvFormatError | undefined;
  private readonly utf8: boolean;
  private readonly text: InstanceType<typeof TextDecoder> | undefined;
  private toSkip: number;
  /** Line breaks passed so far (UTF-8 only; for the line of a bad byte). */
  private lines = 0;
  private lastWasCr = false;
  /** The bytes of a UTF-8 sequence cut by the end of the previous chunk. */
  private carry: Buffer | undefined;
  /** The last two chunks passed on (UTF-8), for a parse error's likely cause (never shown). */
  private recent: Buffer[] = [];

  constructor(
    private readonly file: string,
    start: FileStart,
  ) {
    super();
    this.utf8 = start.encoding.encoding === 'utf-8';
    this.text = this.utf8 ? undefined : new TextDecoder(start.encoding.encoding);
    this.toSkip = start.skip;
    this.lines = start.place.skipLines;
  }

  recentText(): string {
    return Buffer.concat(this.recent).toString('utf8');
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.text !== undefined) {
      this.passText(this.text.decode(chunk, { stream: true }));
      done();
      return;
    }
    let bytes = this.carry === undefined ? chunk : Buffer.concat([this.carry, chunk]);
    this.carry = undefined;
    // isUtf8 is native and fast; the byte-by-byte walk only locates a fault.
    const bad = isUtf8(bytes.subarray(0, bytes.length - cutTail(bytes))) ? undefined : firstInvalidUtf8(bytes, true);
    if (bad !== undefined) {
      const { line, problem } = legacyProblem(bytes, bad, 1 + this.lines - (this.lastWasCr && bytes[0] === 0x0a ? 1 : 0));
      this.failure = new CsvFormatError(this.file, line, problem);
      done(this.failure);
      return;
    }
    const cut = cutTail(bytes);
    if (cut > 0) {
      this.carry = Buffer.from(bytes.subarray(bytes.length - cut));
      bytes = bytes.subarray(0, bytes.length - cut);
    }
    this.countLines(bytes);
    if (this.toSkip > 0) {
      const skip = Math.min(this.toSkip, bytes.length);
      this.toSkip -= skip;
      bytes = bytes.subarray(skip);
    }
    this.remember(bytes);
    if (bytes.length > 0) this.push(bytes);
    done();
  }

  override _flush(done: TransformCallback): void {
    if (this.text !== undefined) this.passText(this.text.decode());
    else if (this.carry !== undefined) {
      const { line, problem } = legacyProblem(this.carry, 0, 1 + this.lines);
      this.failure = new CsvFormatError(this.file, line, problem);
      done(this.failure);
      return;
    }
    done();
  }

  private passText(decoded: string): void {
    // Always decoded in streaming mode (see decodeAll: Node's one-call decode drops bytes).
    let text = decoded;
    if (this.toSkip > 0) {
      const skip = Math.min(this.toSkip, text.length);
      this.toSkip -= skip;
      text = text.slice(skip);
    }
    const bytes = Buffer.from(text, 'utf8');
    this.remember(bytes);
    if (bytes.length > 0) this.push(bytes);
  }

  private remember(bytes: Buffer): void {
    this.recent.push(bytes);
    if (this.recent.length > 2) this.recent.shift();
  }

  private countLines(bytes: Buffer): void {
    // Every CR is a line break, and every LF not just after a CR (indexOf is native: no walk per byte).
    for (let at = bytes.indexOf(0x0d); at !== -1; at = bytes.indexOf(0x0d, at + 1)) this.lines++;
    for (let at = bytes.indexOf(0x0a); at !== -1; at = bytes.indexOf(0x0a, at + 1)) {
      const afterCr = at === 0 ? this.lastWasCr : bytes[at - 1] === 0x0d;
      if (!afterCr) this.lines++;
    }
    // A CRLF cut between two chunks is one line break: its LF is not counted again.
    this.lastWasCr = bytes[bytes.length - 1] === 0x0d;
  }
}

/** How many bytes at the end of `chunk` start a UTF-8 sequence the chunk does not complete. */
function cutTail(chunk: Buffer): number {
  for (let back = 1; back <= Math.min(3, chunk.length); back++) {
    const byte = chunk[chunk.length - back] ?? 0;
    if ((byte & 0xc0) === 0x80) continue;
    if (byte < 0xc0) return 0;
    const length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : 2;
    return back < length ? back : 0;
  }
  return 0;
}

function misreadReason(char: string): string {
  return (
    `the file is not UTF-8: it looks like Windows-1252 whose bytes happen to be valid UTF-8 (it decodes to ${codePointName(char)}, ` +
    'a character no name or code uses, as a capital accented letter followed by a quote or dash does); ' +
    'save it as "CSV UTF-8" and drop it in again, read it as it is with --encoding windows-1252, or say it is UTF-8 with --encoding utf-8'
  );
}

/** What kind of character `char` is, for a message that must not show the data. */
function kindOfCharacter(char: string): string {
  if (char === '\\') return 'a backslash (\\)';
  if (char === ';') return 'a semicolon (;)';
  if (char === '\t') return 'a tab';
  if (char === ',') return 'a comma';
  if (char === '"') return 'a quote';
  if (/^\s$/.test(char)) return 'a space';
  if (/^\d$/.test(char)) return 'a digit';
  if (/^\p{L}$/u.test(char)) return 'a letter';
  return `a punctuation mark or symbol (${codePointName(char)})`;
}

/**
 * A csv-parse error in the product's words: the line, the 1-based column (and
 * its header), what was found and the likely cause. csv-parse's own message
 * quotes the cell's content (a card number would reach stderr and the inbox's
 * error file): it is never used.
 */
function parseErrorReason(err: CsvError, line: number, headers: readonly string[], delimiter: string, recent: string): string {
  const index = typeof err['column'] === 'number' ? err['column'] : undefined;
  const header = index === undefined ? undefined : headers[index]?.trim();
  const column = index === undefined ? '' : `, column ${index + 1}${header ? ` ("${header}")` : ''}`;
  const at = `in the record starting on line ${line}${column}`;
  const backslashes = /\\"/.test(recent);
  const mysql =
    'the file escapes quotes with a backslash (\\"), as MySQL\'s SELECT … INTO OUTFILE writes it: CSV doubles a quote inside a quoted cell (""); ' +
    "export with FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\"'";
  switch (err.code) {
    case 'INVALID_OPENING_QUOTE':
      return `${at}: a quote (") inside a cell that does not start with one; likely cause: a quote typed inside an unquoted cell (quote the whole cell and double the quote inside it, or remove it)`;
    case 'CSV_INVALID_CLOSING_QUOTE': {
      // csv-parse tells the character it found only in its message (no field holds it): read there, once the code chose this case.
      const found = /got "([\s\S])"/.exec(err.message)?.[1];
      const what = found === undefined ? 'another character' : kindOfCharacter(found);
      const cause =
        backslashes || found === '\\'
          ? mysql
          : found === ';' || found === '\t'
            ? `the file seems separated by ${found === ';' ? 'semicolons' : 'tabs'}, while its header was read with ${delimiter === ',' ? 'commas' : JSON.stringify(delimiter)}: save it as "CSV UTF-8 (Comma delimited)"`
            : 'a quote inside a quoted cell that is not doubled ("")';
      return `${at}: after a quote that closes a quoted cell comes ${what}, where the delimiter or the end of the line must be; likely cause: ${cause}`;
    }
    case 'CSV_QUOTE_NOT_CLOSED':
      return `${at}: a quoted cell is never closed (the file ends inside quotes); likely cause: ${backslashes ? mysql : 'a quote opened and not closed, or a quote inside a cell that is not doubled'}`;
    case 'CSV_MAX_RECORD_SIZE':
      return `${at}: the record is over the max record size (${MAX_RECORD_CHARS} characters); likely cause: a quote opened and never closed has swallowed the lines after it`;
    default:
      return `${at}: csv-parse cannot read it (${err.code})`;
  }
}

/**
 * csv-parse's parser, each record made into its row as it is parsed, in
 * order (the line numbers count the records before it), instead of through
 * `on_record`: csv-parse builds two objects of its counters for each call of
 * that hook, which cost a third of the parse. The counters are read here
 * live (`info`). A record the hook refuses stops the parse with that error,
 * as a refusal from `on_record` does.
 */
class RowParser extends Parser {
  private failed = false;

  constructor(
    options: Options,
    private readonly onRecord: (cells: string[], emptyLines: number) => CsvRow | null,
  ) {
    super(options);
  }

  override push(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (chunk === null) return super.push(null, encoding);
    if (this.failed) return false;
    let row: CsvRow | null;
    try {
      if (!Array.isArray(chunk)) throw new TypeError('csv-parse produced a record that is not an array of strings');
      row = this.onRecord(chunk, this.info.empty_lines);
    } catch (error) {
      // Records csv-parse parses after this one in the same chunk are dropped: the read ends here.
      this.failed = true;
      this.destroy(error instanceof Error ? error : new Error(String(error)));
      return false;
    }
    return row === null ? true : super.push(row, encoding);
  }
}

function countLineBreaks(text: string): number {
  if (!text.includes('\n') && !text.includes('\r')) return 0;
  return text.match(LINE_BREAK)?.length ?? 0;
}
