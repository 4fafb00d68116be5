/** `subsync cancel IMPORT_ID [--json]`: stops sending an import's rows; the unsent ones settle `cancelled` and go to unprocessed.csv. */
import type { Command } from 'commander';
import { cliActor } from '../audit/actor.js';
import { AUDIT_ACTIONS, recordAudit } from '../audit/trail.js';
import { cancelImport } from '../import/control.js';
import { withRuntime } from './context.js';

export function register(program: Command): void {
  program
    .command('cancel')
    .description('stop sending the rows of an import: rows never sent settle as cancelled (written to unprocessed.csv beside its results, to import again); rows already sent finish')
    .argument('<importId>', 'the import id')
    .option('--json', 'one JSON object instead of text')
    .action((importId: string, flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const result = await cancelImport({ store: runtime.store, queues: runtime.queues, redis: runtime.redis, logger: runtime.logger, notifier: runtime.notifier, actor: cliActor(runtime.config) }, importId);
        await recordAudit(runtime.redis, runtime.config, { actor: cliActor(runtime.config), action: AUDIT_ACTIONS.cancel, target: importId, details: { before: result.before, cancelled: result.cancelled, inFlight: result.inFlight } });
        if (flags.json) {
          process.stdout.write(`${JSON.stringify(result)}\n`);
          return;
        }
        if (result.before === 'finished') {
          process.stdout.write(`import ${importId} has already finished: nothing to cancel\n`);
          return;
        }
        if (result.before === 'cancelled') {
          process.stdout.write(`import ${importId} is already cancelled\n`);
          return;
        }
        const left = result.inFlight > 0 ? `; ${result.inFlight} row(s) already sent or under way finish as they would have` : '';
        process.stdout.write(`cancelled import ${importId}: ${result.cancelled} row(s) never sent settled as cancelled${left}; they go to unprocessed.csv beside the results (\`subsync status ${importId}\`)\n`);
      }),
    );
}
