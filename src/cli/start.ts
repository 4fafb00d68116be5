/**
 * `subsync start`: worker, watcher and dashboard (what docker-compose runs)
 * until SIGTERM/SIGINT, then closed in reverse order: the dashboard stops
 * answering, the watcher finishes an enqueue under way, the workers let
 * their active jobs finish. The export schedule needs nothing here: BullMQ
 * job schedulers are run by the control worker.
 *
 * The watcher runs as `subsync watch` in a process of its own, started and
 * stopped by this one: reading a big file dropped into the inbox (parsing,
 * checking, queuing its rows, and the garbage that makes) then takes no
 * turns of the event loop the worker's paced requests wake on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { requireApiUrl } from '../config.js';
import { requireTokenOffLoopback } from '../dashboard/auth.js';
import { SubsyncError } from '../errors.js';
import { startWorkers } from '../runtime.js';
import { withRuntime } from './context.js';
import { addDashboardOptions, startDashboardFor, type DashboardFlags } from './dashboard.js';
import { waitForShutdownSignal } from './signals.js';
import { addWatchOptions, inboxOfWatchingLine, type WatchFlags } from './watch.js';
import { parseConcurrency } from './worker.js';

export interface StartFlags extends WatchFlags, DashboardFlags {
  concurrency?: number;
}

/** The watcher's process ended while `start` was not stopping it (or before it was watching). */
export class WatcherExitedError extends SubsyncError {
  readonly code = 'WATCHER_EXITED';
}

export function register(program: Command): void {
  const command = program
    .command('start')
    .description('run worker, inbox watcher and dashboard until SIGTERM/SIGINT (what docker-compose runs); the watcher in a process of its own')
    .option('--concurrency <n>', 'rows at the API at once in this process, and jobs held (default: SUBSYNC_CONCURRENCY)', parseConcurrency);
  addWatchOptions(addDashboardOptions(command)).action((flags: StartFlags) => runStart(flags));
}

export async function runStart(flags: StartFlags): Promise<void> {
  const signal = waitForShutdownSignal();
  await withRuntime(async (runtime) => {
    const apiUrl = requireApiUrl(runtime.config);
    const concurrency = flags.concurrency ?? runtime.config.concurrency;
    // Workers first, so the watcher's first enqueue has someone to run it.
    startWorkers(runtime, { apiUrl, concurrency });
    const watcher = startWatcherProcess(flags);
    // Closed before the workers, after the dashboard: the watcher finishes an enqueue under way.
    runtime.adopt(() => watcher.stop());
    const inbox = await watcher.watching;
    const dashboard = await startDashboardFor(runtime, flags);
    runtime.logger.info({ concurrency, inbox, watcherPid: watcher.pid, dashboard: dashboard.url }, 'started');
    process.stdout.write(
      `worker running (concurrency ${concurrency})\nwatching ${inbox}\n` + `dashboard: ${dashboard.url}${dashboard.token ? ' (token required)' : ''}\nSIGTERM or Ctrl-C stops it\n`,
    );
    const stopped = await Promise.race([signal, watcher.exited.then((exit) => ({ exit }))]);
    if (typeof stopped === 'object') {
      // Everything stops, so that whatever restarts `start` (docker-compose's restart policy) restarts it whole.
      runtime.logger.error({ watcherPid: watcher.pid, exit: stopped.exit }, 'the inbox watcher exited: stopping dashboard and workers (active jobs finish)');
      throw new WatcherExitedError(`the inbox watcher (pid ${watcher.pid ?? '?'}) exited (${stopped.exit}) while start ran; start stopped too`);
    }
    runtime.logger.info({ signal: stopped }, 'stopping: dashboard, watcher, then workers (active jobs finish)');
    // Checked before Redis is opened and any worker starts: a dashboard that may not start stops the whole process.
  }, {}, (config) => requireTokenOffLoopback(flags.host, config.dashboardToken, config.dashboardTokens), { sends: true });
}

/** The watcher's process: its pid, its inbox once it watches, how it ended, and how to stop it. */
interface WatcherProcess {
  pid: number | undefined;
  /** Resolves with the inbox once the watcher watches it; rejects when it exits first. */
  watching: Promise<string>;
  /** Resolves, whoever stopped it, with how it ended (`code N` or `signal S`). */
  exited: Promise<string>;
  /** Closes its channel (it stops as on SIGTERM: an enqueue under way finishes) and waits for it to end. */
  stop(): Promise<void>;
}

/**
 * `subsync watch` with `flags`, this process's environment and Node
 * options, and a channel to this process: closing the channel stops it,
 * and so does this process's death, however it dies. Its log goes to this
 * process's stderr; the line it prints once watching tells its inbox.
 */
function startWatcherProcess(flags: WatchFlags): WatcherProcess {
  const entry = process.argv[1];
  if (entry === undefined) throw new Error('no script path in process.argv: cannot start the watcher');
  // Node's options but a debugger's: its port is this process's.
  const nodeOptions = process.execArgv.filter((option) => !option.startsWith('--inspect'));
  const child: ChildProcess = spawn(process.execPath, [...nodeOptions, entry, 'watch', ...watchArguments(flags)], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  // A process that could not be started at all ends as one that exited.
  const exited = once(child, 'exit').then(
    ([code, signal]: unknown[]) => (signal ? `signal ${String(signal)}` : `code ${String(code)}`),
    (error: unknown) => `not started: ${error instanceof Error ? error.message : String(error)}`,
  );
  const watching = new Promise<string>((resolve, reject) => {
    // Its one line once it watches; anything else it prints goes on to this process's stdout.
    const lines = createInterface({ input: child.stdout as NonNullable<ChildProcess['stdout']> });
    lines.on('line', (line) => {
      const inbox = inboxOfWatchingLine(line);
      if (inbox !== undefined) resolve(inbox);
      else process.stdout.write(`${line}\n`);
    });
    void exited.then((exit) => reject(new WatcherExitedError(`the inbox watcher exited (${exit}) before it watched the inbox`)));
  });
  // Awaited by whoever starts it; a rejection nobody awaits (start failed first) is not an unhandled one.
  watching.catch(() => undefined);
  return {
    pid: child.pid,
    watching,
    exited,
    async stop() {
      if (child.connected) child.disconnect();
      await exited;
    },
  };
}

/** `flags` as `subsync watch` takes them on its command line. */
function watchArguments(flags: WatchFlags): string[] {
  const args = ['--card-retention', String(flags.cardRetention), '--poll-ms', String(flags.pollMs)];
  if (flags.inbox !== undefined) args.push('--inbox', flags.inbox);
  if (flags.settleMs !== undefined) args.push('--settle-ms', String(flags.settleMs));
  if (flags.failedRetention !== undefined) args.push('--failed-retention', String(flags.failedRetention));
  if (flags.priority !== undefined) args.push('--priority', flags.priority);
  return args;
}
