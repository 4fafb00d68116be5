/**
 * Errors of the CSV layer, each with a stable `code`. Call sites branch on the
 * classes or the codes, never on message text.
 *
 * - FileRejectedError: the file as a whole breaks the contract (header
 *   problems, undecidable kind, no header row); nothing of it is enqueued,
 *   and the inbox file goes to `failed/`.
 * - CsvFormatError: the bytes are not a CSV file csv-parse can read (an
 *   unclosed quote, a stray quote, bytes that are not UTF-8). Reading stops at
 *   the record that starts on `line`.
 * - ColumnMapError: the `--map FILE` itself is unreadable or malformed; the
 *   operator's mapping is at fault, not the file being imported.
 */

import { SubsyncError } from '../errors.js';

export type CsvErrorCode = 'FILE_REJECTED' | 'CSV_FORMAT' | 'COLUMN_MAP';

/** The whole file is refused before anything is enqueued; `problems` lists every reason at once. */
export class FileRejectedError extends SubsyncError {
  readonly code = 'FILE_REJECTED';
  readonly file: string;
  /** One sentence per problem, e.g. `unknown column "EmailAdress" (did you mean "EmailAddress"?)`. */
  readonly problems: string[];

  constructor(file: string, problems: string[]) {
    super(`${file}: rejected: ${problems.join('; ')}`);
    this.file = file;
    this.problems = problems;
  }
}

/** The file is not readable CSV from `line` on (1-based line where the failing record starts). */
export class CsvFormatError extends SubsyncError {
  readonly code = 'CSV_FORMAT';
  readonly file: string;
  readonly line: number;
  /** What went wrong, in the parser's words (csv-parse's message), or subsync's for encoding. */
  readonly reason: string;

  constructor(file: string, line: number, reason: string, options?: { cause?: unknown }) {
    super(`${file}:${line}: not readable as CSV: ${reason}`, options);
    this.file = file;
    this.line = line;
    this.reason = reason;
  }
}

/** The `--map FILE` JSON could not be read or is not `{"Their Column": "Path" | null}`. */
export class ColumnMapError extends SubsyncError {
  readonly code = 'COLUMN_MAP';
  /** The map file. */
  readonly file: string;
  readonly problems: string[];

  constructor(file: string, problems: string[], options?: { cause?: unknown }) {
    super(`${file}: invalid column map: ${problems.join('; ')}`, options);
    this.file = file;
    this.problems = problems;
  }
}
