/** `subsync retry IMPORT_ID [--row N | --group CODE [--dry-run]] [--json]`: runs failed and needs-review rows again, and stuck ones (pending or sent, no job). */
import { InvalidArgumentError, type Command } from 'commander';
import { cliActor } from '../audit/actor.js';
import { AUDIT_ACTIONS, recordAudit } from '../audit/trail.js';
import { RetryError, retryGroup, retryRows, type GroupRetryResult } from '../import/retry.js';
import { withRuntime } from './context.js';

function parseRow(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a row number, 1 or more');
  return n;
}

interface RetryFlags {
  row?: number;
  group?: string;
  dryRun?: boolean;
  json?: boolean;
}

export function register(program: Command): void {
  program
    .command('retry')
    .description('run the failed and needs-review rows of an import again, and its stuck rows (pending or sent with no job that will run them); needs-review and sent rows reconcile first')
    .argument('<importId>', 'the import id')
    .option('--row <n>', 'only this row', parseRow)
    .option('--group <code>', 'only the rows of this group of `subsync errors` (its code, e.g. failed:3f9a2c1b)')
    .option('--dry-run', 'with --group: say how many rows would be sent, and how many may create customers or subscriptions; send nothing')
    .option('--json', 'one JSON object instead of text')
    .action((importId: string, flags: RetryFlags) =>
      withRuntime(async (runtime) => {
        // RetryError, not commander's own: commander has printed nothing for these, and exit 64 comes with the line.
        if (flags.row !== undefined && flags.group !== undefined) throw new RetryError('--row and --group: give one or the other');
        if (flags.dryRun && flags.group === undefined) throw new RetryError('--dry-run goes with --group');
        if (flags.group !== undefined) {
          const result = await retryGroup(runtime.store, runtime.queues, importId, flags.group, { dryRun: flags.dryRun === true });
          // A dry run changes nothing: only what was sent is recorded.
          if (!result.dryRun) {
            await recordAudit(runtime.redis, runtime.config, {
              actor: cliActor(runtime.config),
              action: AUDIT_ACTIONS.retryGroup,
              target: importId,
              details: { group: result.group, retried: result.retried, skipped: result.skipped.map((s) => s.row) },
            });
          }
          if (flags.json) process.stdout.write(`${JSON.stringify(result)}\n`);
          else printGroup(result);
          return;
        }
        const result = await retryRows(runtime.store, runtime.queues, importId, flags.row);
        await recordAudit(runtime.redis, runtime.config, {
          actor: cliActor(runtime.config),
          action: AUDIT_ACTIONS.retry,
          target: importId,
          details: { scope: flags.row === undefined ? 'all' : 'row', retried: result.retried, skipped: result.skipped.map((s) => s.row) },
        });
        if (flags.json) {
          process.stdout.write(`${JSON.stringify({ importId, ...result })}\n`);
          return;
        }
        process.stdout.write(`retrying ${result.retried.length} row(s)${result.retried.length ? `: ${result.retried.join(', ')}` : ''}\n`);
        for (const skip of result.skipped) process.stdout.write(`  row ${skip.row} not retried: ${skip.reason}\n`);
      }),
    );
}

function printGroup(result: GroupRetryResult): void {
  const creating = `${result.mayCreate} of them may create customers or subscriptions`;
  if (result.dryRun) process.stdout.write(`would send ${result.rows} row(s) of group ${result.group} (${result.reason}); ${creating}; nothing sent\n`);
  else process.stdout.write(`retrying ${result.rows} row(s) of group ${result.group}${result.retried.length ? `: ${result.retried.join(', ')}` : ''}; ${creating}\n`);
  for (const skip of result.skipped) process.stdout.write(`  row ${skip.row} not retried: ${skip.reason}\n`);
}
