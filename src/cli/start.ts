/**
 * `subsync start`: worker, watcher and dashboard in one process (what
 * docker-compose runs) until SIGTERM/SIGINT, then closed in reverse order:
 * the dashboard stops answering, the watcher finishes an enqueue under way,
 * the workers let their active jobs finish. The export schedule needs nothing
 * here: BullMQ job schedulers are run by the control worker.
 */
import type { Command } from 'commander';
import { requireApiUrl } from '../config.js';
import { requireTokenOffLoopback } from '../dashboard/auth.js';
import { startWorkers } from '../runtime.js';
import { withRuntime } from './context.js';
import { addDashboardOptions, startDashboardFor, type DashboardFlags } from './dashboard.js';
import { waitForShutdownSignal } from './signals.js';
import { addWatchOptions, startWatcherFor, type WatchFlags } from './watch.js';
import { parseConcurrency } from './worker.js';

export interface StartFlags extends WatchFlags, DashboardFlags {
  concurrency?: number;
}

export function register(program: Command): void {
  const command = program
    .command('start')
    .description('run worker, inbox watcher and dashboard in one process until SIGTERM/SIGINT (what docker-compose runs)')
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
    const watcher = await startWatcherFor(runtime, flags);
    const dashboard = await startDashboardFor(runtime, flags);
    runtime.logger.info({ concurrency, inbox: watcher.folders.inbox, dashboard: dashboard.url }, 'started');
    process.stdout.write(
      `worker running (concurrency ${concurrency})\nwatching ${watcher.folders.inbox}\n` +
        `dashboard: ${dashboard.url}${dashboard.token ? ' (token required)' : ''}\nSIGTERM or Ctrl-C stops it\n`,
    );
    const received = await signal;
    runtime.logger.info({ signal: received }, 'stopping: dashboard, watcher, then workers (active jobs finish)');
    // Checked before Redis is opened and any worker starts: a dashboard that may not start stops the whole process.
  }, {}, (config) => requireTokenOffLoopback(flags.host, config.dashboardToken, config.dashboardTokens), { sends: true });
}
