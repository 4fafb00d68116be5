/**
 * Exit codes, mapped from error classes in this one place (STYLE habit 9).
 * Commands throw; they never call `process.exit` with a number of their own.
 */
import { CommanderError } from 'commander';
import { ConfigError } from '../config.js';
import { ColumnMapError, CsvFormatError, FileRejectedError } from '../csv/errors.js';
import { DashboardNeedsTokenError } from '../dashboard/auth.js';
import { ExportFailedError, ExportIncompleteError } from '../export/errors.js';
import { RetryError } from '../import/retry.js';
import { RedisCheckError } from '../queue/redis.js';

/** `import --wait` settled, and some rows did not succeed: exit 3. */
export class RowsDidNotSucceedError extends Error {
  readonly code = 'ROWS_DID_NOT_SUCCEED';
}

/** Every exit code subsync uses. Scripts may rely on these. */
export const EXIT_CODES = {
  /** Done; for `import --wait`, every row succeeded. */
  ok: 0,
  /** An unexpected error (a bug or an unclassified failure); the stack is printed. */
  failure: 1,
  /** The whole file was rejected before anything was enqueued (headers, format, card key, all-or-nothing). */
  rejectedFile: 2,
  /** `import --wait`: the import settled, and some rows did not succeed; `export --wait`: the file was written but is not proven complete. */
  rowsFailed: 3,
  /** Redis is unreachable or unsuitable (sysexits EX_UNAVAILABLE). */
  unavailable: 69,
  /** Bad command-line usage: unknown command or flag, invalid flag value (sysexits EX_USAGE). */
  usage: 64,
  /** Invalid configuration in the environment (sysexits EX_CONFIG). */
  config: 78,
} as const;

/** What the CLI does with an error: the code to exit with, and what to print on stderr (if anything). */
export interface ExitReport {
  code: number;
  message?: string;
}

/** Maps an error thrown by a command to its exit code and message. */
export function exitReportFor(err: unknown): ExitReport {
  // commander has already printed its own message (or the help / version).
  if (err instanceof CommanderError) return { code: err.exitCode === 0 ? EXIT_CODES.ok : EXIT_CODES.usage };
  if (err instanceof FileRejectedError || err instanceof CsvFormatError || err instanceof ColumnMapError) {
    return { code: EXIT_CODES.rejectedFile, message: `subsync: ${err.message}` };
  }
  if (err instanceof RowsDidNotSucceedError) return { code: EXIT_CODES.rowsFailed, message: `subsync: ${err.message}` };
  if (err instanceof ExportIncompleteError) return { code: EXIT_CODES.rowsFailed, message: `subsync: ${err.message}` };
  if (err instanceof ExportFailedError) return { code: EXIT_CODES.failure, message: `subsync: ${err.message}` };
  if (err instanceof RedisCheckError) return { code: EXIT_CODES.unavailable, message: `subsync: ${err.message}` };
  if (err instanceof RetryError) return { code: EXIT_CODES.usage, message: `subsync: ${err.message}` };
  if (err instanceof DashboardNeedsTokenError) return { code: EXIT_CODES.config, message: `subsync: ${err.message}` };
  if (err instanceof ConfigError) {
    return { code: EXIT_CODES.config, message: `subsync: invalid configuration (see subsync --help):\n${indent(err.message)}` };
  }
  const text = err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) : String(err);
  return { code: EXIT_CODES.failure, message: `subsync: ${text}` };
}

function indent(text: string): string {
  return text
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');
}
