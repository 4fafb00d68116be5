/** `subsync retry IMPORT_ID [--row N]`: runs failed and needs-review rows again, and stuck ones (pending or sent, no job). */
import { InvalidArgumentError, type Command } from 'commander';
import { retryRows } from '../import/retry.js';
import { withRuntime } from './context.js';

function parseRow(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a row number, 1 or more');
  return n;
}

export function register(program: Command): void {
  program
    .command('retry')
    .description('run the failed and needs-review rows of an import again, and its stuck rows (pending or sent with no job that will run them); needs-review and sent rows reconcile first')
    .argument('<importId>', 'the import id')
    .option('--row <n>', 'only this row', parseRow)
    .action((importId: string, flags: { row?: number }) =>
      withRuntime(async (runtime) => {
        const result = await retryRows(runtime.store, runtime.queues, importId, flags.row);
        process.stdout.write(`retrying ${result.retried.length} row(s)${result.retried.length ? `: ${result.retried.join(', ')}` : ''}\n`);
        for (const skip of result.skipped) process.stdout.write(`  row ${skip.row} not retried: ${skip.reason}\n`);
      }),
    );
}
