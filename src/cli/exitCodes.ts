/**
 * Exit codes, mapped from error codes (src/errors.ts) in this one place.
 * Commands throw; they never call `process.exit` with a number of their own.
 */
import { statSync } from 'node:fs';
import path from 'node:path';
import { CommanderError } from 'commander';
import { SubsyncError, type SubsyncErrorCode } from '../errors.js';
import { isRedisOutOfMemory, redisOutOfMemoryMessage } from '../redis/redis.js';

/** `import --wait` settled, and some rows did not succeed: exit 3. */
export class RowsDidNotSucceedError extends SubsyncError {
  readonly code = 'ROWS_DID_NOT_SUCCEED';
}

/** `import --wait`: rows remain and nothing will run them (no worker, or none with the card key): exit 75. */
export class ImportStalledError extends SubsyncError {
  readonly code = 'IMPORT_STALLED';
}

/** `import --wait`: the import paused (its canary found too many failures, or an operator paused it): exit 4. */
export class ImportPausedError extends SubsyncError {
  readonly code = 'IMPORT_PAUSED';
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
  /** `import --wait`: the import paused (its canary, or an operator); `subsync resume` runs it on. */
  paused: 4,
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

/** An exit code's name in {@link EXIT_CODES}, or `unexpected`: exit 1 with the error's stack. */
export type ExitOfError = Exclude<keyof typeof EXIT_CODES, 'ok'> | 'unexpected';

/**
 * What a command that lets a subsync error out exits with, by the error's
 * code: one of {@link EXIT_CODES}, with the message as one line; or
 * `unexpected` (exit 1 with the stack) for an error no command is meant to
 * let out, which is a bug or a failure nothing classified. Every code has its
 * entry: a new code does not typecheck until it is given one.
 */
export const EXIT_OF_CODE: Readonly<Record<SubsyncErrorCode, ExitOfError>> = {
  // A command that talks to the service (export, customer-index) lets these out only when its own retries gave up.
  API_REFUSED: 'unexpected',
  API_NOT_FOUND: 'unexpected',
  API_UNAUTHORIZED: 'unexpected',
  API_RATE_LIMITED: 'unexpected',
  API_SERVER_ERROR: 'unexpected',
  API_TIMEOUT: 'unexpected',
  API_NETWORK: 'unexpected',
  API_BAD_RESPONSE: 'unexpected',
  CONFIG_INVALID: 'config',
  DASHBOARD_NEEDS_TOKEN: 'config',
  REDIS_UNREACHABLE: 'unavailable',
  REDIS_EVICTION: 'unavailable',
  REDIS_OOM: 'unavailable',
  REDIS_PERSISTS_NOTHING: 'unavailable',
  // The keyring is built from a configuration already checked; these are found by workers, row by row.
  CARD_KEY_INVALID: 'unexpected',
  CARD_KEY_UNKNOWN: 'unexpected',
  CARD_DATA_TAMPERED: 'unexpected',
  CARD_DATA_INVALID: 'unexpected',
  FILE_REJECTED: 'rejectedFile',
  CSV_FORMAT: 'rejectedFile',
  COLUMN_MAP: 'rejectedFile',
  // The inbox handles it: the file goes to failed/.
  FILE_CHANGED: 'unexpected',
  // A dead watcher stops `start` with a line that says so; its own log (on the same stderr) tells why it died.
  WATCHER_EXITED: 'failure',
  IMPORT_NOT_FOUND: 'notFound',
  ROWS_DID_NOT_SUCCEED: 'rowsFailed',
  IMPORT_STALLED: 'stalled',
  RETRY_REFUSED: 'usage',
  RUN_CONTROL_REFUSED: 'usage',
  IMPORT_PAUSED: 'paused',
  // The dashboard's edit form shows it.
  EDIT_REFUSED: 'unexpected',
  // A row's transient failure: its job retries it.
  SAME_PERSON_RUNNING: 'unexpected',
  // Inside a worker's run of a row.
  ROW_TAKEN: 'unexpected',
  ROW_FENCED: 'unexpected',
  ROW_MARK_HELD: 'unexpected',
  // `customer-index refresh` lets it out when Redis lost writes while it built: run again.
  INDEX_WRITES_LOST: 'unavailable',
  ROW_CARD_CELLS_GONE: 'unexpected',
  ROW_UNRUNNABLE: 'unexpected',
  EXPORT_FAILED: 'failure',
  EXPORT_INCOMPLETE: 'rowsFailed',
  EXPORT_SPOOL_CORRUPT: 'unexpected',
  // The listing falls back to partitions.
  EXPORT_EMPTY_SEARCH_REFUSED: 'unexpected',
  SCHEDULE_INVALID: 'usage',
  // Inside a worker's delivery of a notification: its job retries.
  WEBHOOK_UNANSWERED: 'unexpected',
  WEBHOOK_REFUSED: 'unexpected',
};

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
  const code = errorCodeOf(err);
  const exit = code === undefined ? 'unexpected' : EXIT_OF_CODE[code];
  if (code !== undefined && exit !== 'unexpected') return { code: EXIT_CODES[exit], message: `subsync: ${shown(code, err)}` };
  const text = err instanceof Error ? (err.stack ?? `${err.name}: ${err.message}`) : String(err);
  return { code: EXIT_CODES.failure, message: `subsync: ${text}` };
}

/** The code of a subsync error, or of Redis refusing a write for want of memory (an ioredis reply). */
export function errorCodeOf(err: unknown): SubsyncErrorCode | undefined {
  if (err instanceof SubsyncError) return err.code;
  if (isRedisOutOfMemory(err)) return 'REDIS_OOM';
  return undefined;
}

/** What the operator reads of an expected error: its message (one line); the configuration's problems one per line under a heading. */
function shown(code: SubsyncErrorCode, err: unknown): string {
  if (code === 'REDIS_OOM') return redisOutOfMemoryMessage('command');
  const message = err instanceof Error ? err.message : String(err);
  return code === 'CONFIG_INVALID' ? `invalid configuration (see subsync --help):\n${indent(message)}` : message;
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
