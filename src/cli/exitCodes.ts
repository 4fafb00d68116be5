/**
 * Exit codes, mapped from error classes in this one place.
 * Commands throw; they never call `process.exit` with a number of their own.
 */
import { statSync } from 'node:fs';
import path from 'node:path';
import { CommanderError } from 'commander';
import { ConfigError } from '../config.js';
import { ColumnMapError, CsvFormatError, FileRejectedError } from '../csv/errors.js';
import { DashboardNeedsTokenError } from '../dashboard/auth.js';
import { ExportFailedError, ExportIncompleteError } from '../export/errors.js';
import { RetryError } from '../import/retry.js';
import { ImportNotFoundError } from '../import/status.js';
import { RedisCheckError, isRedisOutOfMemory, redisOutOfMemoryMessage } from '../redis/redis.js';

/** `import --wait` settled, and some rows did not succeed: exit 3. */
export class RowsDidNotSucceedError extends Error {
  readonly code = 'ROWS_DID_NOT_SUCCEED';
}

/** `import --wait`: rows remain and nothing will run them (no worker, or none with the card key): exit 75. */
export class ImportStalledError extends Error {
  readonly code = 'IMPORT_STALLED';
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
  /** No such import in Redis (`status`, `retry`), or it vanished while `import --wait` waited (sysexits EX_NOINPUT). */
  notFound: 66,
  /** `import --wait` stopped waiting: rows remain and no worker that can run them is running (sysexits EX_TEMPFAIL). */
  stalled: 75,
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

/**
 * Maps an error thrown by a command to its exit code and message. `argv` is
 * the command line after `subsync` (default: this process's): a file the
 * operator named that cannot be read is a rejected file, not a failure.
 */
export function exitReportFor(err: unknown, argv: readonly string[] = process.argv.slice(2)): ExitReport {
  // commander has already printed its own message (or the help / version).
  if (err instanceof CommanderError) return { code: err.exitCode === 0 ? EXIT_CODES.ok : EXIT_CODES.usage };
  const unreadable = unreadableFileArgument(err, argv);
  if (unreadable !== undefined) return { code: EXIT_CODES.rejectedFile, message: `subsync: ${unreadable}` };
  if (err instanceof FileRejectedError || err instanceof CsvFormatError || err instanceof ColumnMapError) {
    return { code: EXIT_CODES.rejectedFile, message: `subsync: ${err.message}` };
  }
  if (err instanceof RowsDidNotSucceedError) return { code: EXIT_CODES.rowsFailed, message: `subsync: ${err.message}` };
  if (err instanceof ExportIncompleteError) return { code: EXIT_CODES.rowsFailed, message: `subsync: ${err.message}` };
  if (err instanceof ExportFailedError) return { code: EXIT_CODES.failure, message: `subsync: ${err.message}` };
  if (err instanceof RedisCheckError) return { code: EXIT_CODES.unavailable, message: `subsync: ${err.message}` };
  if (isRedisOutOfMemory(err)) return { code: EXIT_CODES.unavailable, message: `subsync: ${redisOutOfMemoryMessage('command')}` };
  if (err instanceof ImportNotFoundError) return { code: EXIT_CODES.notFound, message: `subsync: ${err.message}` };
  if (err instanceof ImportStalledError) return { code: EXIT_CODES.stalled, message: `subsync: ${err.message}` };
  if (err instanceof RetryError) return { code: EXIT_CODES.usage, message: `subsync: ${err.message}` };
  if (err instanceof DashboardNeedsTokenError) return { code: EXIT_CODES.config, message: `subsync: ${err.message}` };
  if (err instanceof ConfigError) {
    return { code: EXIT_CODES.config, message: `subsync: invalid configuration (see subsync --help):\n${indent(err.message)}` };
  }
  const text = err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) : String(err);
  return { code: EXIT_CODES.failure, message: `subsync: ${text}` };
}

/** Commands whose operands are files to read: `import FILE`. */
const FILE_COMMANDS: ReadonlySet<string> = new Set(['import']);

/**
 * Why a file named on the command line could not be read, when `err` is the
 * file system saying so (missing, a directory, not reachable): one line for
 * the operator. Undefined for any other error, which stays unexpected. EISDIR
 * carries no path, so the operands are looked at for a directory.
 */
function unreadableFileArgument(err: unknown, argv: readonly string[]): string | undefined {
  if (!(err instanceof Error) || !('code' in err) || typeof err.code !== 'string') return undefined;
  if (argv[0] === undefined || !FILE_COMMANDS.has(argv[0])) return undefined;
  const operands = argv.slice(1).filter((arg) => !arg.startsWith('-'));
  const errPath = 'path' in err && typeof err.path === 'string' ? path.resolve(err.path) : undefined;
  const named = operands.find((operand) => errPath !== undefined && path.resolve(operand) === errPath);
  switch (err.code) {
    case 'ENOENT':
      return named === undefined ? undefined : `${named}: no such file`;
    case 'ENOTDIR':
      return named === undefined ? undefined : `${named}: no such file (a part of its path is not a folder)`;
    case 'EACCES':
      return named === undefined ? undefined : `${named}: permission denied`;
    case 'EISDIR': {
      const folder = named ?? operands.find((operand) => isDirectory(operand));
      return folder === undefined ? undefined : `${folder}: is a folder, not a CSV file`;
    }
    default:
      return undefined;
  }
}

function isDirectory(file: string): boolean {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

function indent(text: string): string {
  return text
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');
}
