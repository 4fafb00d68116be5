/**
 * `subsync worker`: runs row and control jobs until SIGTERM/SIGINT, then lets
 * its active jobs finish (or hands them back when they cannot) and exits.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { requireApiUrl } from '../config.js';
import { startWorkers } from '../runtime.js';
import { withRuntime } from './context.js';
import { waitForShutdownSignal } from './signals.js';

export interface WorkerFlags {
  concurrency?: number;
  control: boolean;
}

export function parseConcurrency(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw new InvalidArgumentError('expected a whole number from 1 to 1000');
  return n;
}

export function register(program: Command): void {
  program
    .command('worker')
    .description('run row jobs against the API (and control jobs: results, exports) until SIGTERM/SIGINT')
    .option('--concurrency <n>', 'rows at the API at once in this process, and jobs held (default: SUBSYNC_CONCURRENCY)', parseConcurrency)
    .option('--no-control', 'do not run control jobs (results files) in this process')
    .action((flags: WorkerFlags) => runWorker(flags));
}

export async function runWorker(flags: WorkerFlags): Promise<void> {
  const signal = waitForShutdownSignal();
  await withRuntime(async (runtime) => {
    const apiUrl = requireApiUrl(runtime.config);
    const concurrency = flags.concurrency ?? runtime.config.concurrency;
    startWorkers(runtime, { apiUrl, concurrency, control: flags.control });
    runtime.logger.info({ concurrency, rate: runtime.config.rate ?? 'unlimited', control: flags.control }, 'worker started');
    process.stdout.write(`worker running (concurrency ${concurrency}); SIGTERM or Ctrl-C stops it\n`);
    const received = await signal;
    runtime.logger.info({ signal: received }, 'worker stopping: letting active jobs finish');
  }, {}, undefined, { sends: true });
}
