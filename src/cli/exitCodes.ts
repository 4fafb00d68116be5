/**
 * Exit codes, mapped from error classes in this one place (STYLE habit 9).
 * Commands throw; they never call `process.exit` with a number of their own.
 */
import { CommanderError } from 'commander';
import { ConfigError } from '../config.js';

/** Every exit code subsync uses. Scripts may rely on these. */
export const EXIT_CODES = {
  /** Done; for `import --wait`, every row succeeded. */
  ok: 0,
  /** An unexpected error (a bug or an unclassified failure); the stack is printed. */
  failure: 1,
  // Reserved for `import --wait` (DESIGN section 8):
  // rejectedFile: 2  - the whole file was rejected before anything was enqueued
  // rowsFailed: 3    - the import settled, and some rows did not succeed
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
