/**
 * `subsync watch [--inbox DIR]`: takes files dropped into the inbox, imports
 * each once, and moves it to done/ or failed/ (src/watch/inbox.ts) until
 * SIGTERM/SIGINT. Rows are run by workers (`subsync worker`, or `subsync
 * start`, which runs both).
 */
import { InvalidArgumentError, type Command } from 'commander';
import { startWatcher, DEFAULT_POLL_MS, type Watcher } from '../watch/inbox.js';
import type { Runtime } from '../runtime.js';
import { withRuntime } from './context.js';
import { parseNonEmpty, parseNonNegativeInt } from './options.js';
import { waitForShutdownSignal } from './signals.js';
import { parsePriority } from './import.js';
import type { ImportPriority } from '../queue/feeder.js';

/** The watcher's flags, shared by `watch` and `start`. */
export interface WatchFlags {
  inbox?: string;
  cardRetention: number;
  pollMs: number;
  /** Unset: SUBSYNC_INBOX_SETTLE_MS. */
  settleMs?: number;
  /** Days; unset: SUBSYNC_FAILED_RETENTION_DAYS. */
  failedRetention?: number;
  /** The priority of every file of this inbox in the turn of imports (an urgent inbox: its own watcher with `--priority high`). */
  priority?: ImportPriority;
}

/** Declares the watcher's flags on `command` (`watch` and `start` take the same). */
export function addWatchOptions(command: Command): Command {
  return command
    .option('--inbox <dir>', 'the inbox folder, with customers/, signups/ and cards/ inside (default: <SUBSYNC_DATA_DIR>/inbox)', parseNonEmpty)
    .option('--card-retention <seconds>', 'how long a processed file holding card data (signups, cards) stays in done/ before it is deleted', parseNonNegativeInt, 0)
    .option('--poll-ms <ms>', 'how often the inbox is read, in milliseconds', parsePollMs, DEFAULT_POLL_MS)
    .option('--failed-retention <days>', 'how long rejected files and their error files stay in failed/, in days (default: SUBSYNC_FAILED_RETENTION_DAYS, 30)', parseDays)
    .option('--priority <level>', "high, normal or low: the weight of this inbox's files when imports take turns at the rate (run a watcher per inbox for an urgent one)", parsePriority, 'normal')
    .option('--settle-ms <ms>', 'how long a file must stay unchanged (size and mtime) before it is taken, in milliseconds (default: SUBSYNC_INBOX_SETTLE_MS, 5000)', parseNonNegativeInt);
}

function parseDays(value: string): number {
  const days = parseNonNegativeInt(value);
  if (days < 1) throw new InvalidArgumentError('expected a whole number of days, 1 or more');
  return days;
}

/** Below 10 ms the folders would be read in a busy loop. */
function parsePollMs(value: string): number {
  const ms = parseNonNegativeInt(value);
  if (ms < 10) throw new InvalidArgumentError('expected a whole number of milliseconds, 10 or more');
  return ms;
}

/** Starts the watcher for `flags` on `runtime`, closed with the runtime (before its connections). */
export async function startWatcherFor(runtime: Runtime, flags: WatchFlags): Promise<Watcher> {
  const watcher = await startWatcher({
    runtime,
    inbox: flags.inbox,
    pollMs: flags.pollMs,
    settleMs: flags.settleMs ?? runtime.config.inboxSettleMs,
    cardRetentionMs: flags.cardRetention * 1000,
    failedRetentionMs: (flags.failedRetention ?? runtime.config.failedRetentionDays) * 86_400_000,
    priority: flags.priority,
  });
  runtime.adopt(() => watcher.close());
  return watcher;
}

/** The line `watch` prints once it watches `inbox` (`start` reads its watcher's inbox from it: {@link inboxOfWatchingLine}). */
export function watchingLine(inbox: string): string {
  return `watching ${inbox} (customers/, signups/, cards/, or the kind from the headers); SIGTERM or Ctrl-C stops it\n`;
}

/** The inbox a {@link watchingLine} names (read without its newline), or undefined for any other line. */
export function inboxOfWatchingLine(line: string): string | undefined {
  return /^watching (.+?) \(customers\/, /.exec(line)?.[1];
}

export function register(program: Command): void {
  addWatchOptions(program.command('watch').description('take CSV files dropped into the inbox and import each once, until SIGTERM/SIGINT')).action((flags: WatchFlags) =>
    runWatch(flags),
  );
}

export async function runWatch(flags: WatchFlags): Promise<void> {
  const signal = waitForShutdownSignal();
  await withRuntime(async (runtime) => {
    const watcher = await startWatcherFor(runtime, flags);
    process.stdout.write(watchingLine(watcher.folders.inbox));
    const received = await signal;
    runtime.logger.info({ signal: received }, 'watcher stopping');
  });
}
