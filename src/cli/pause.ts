/** `subsync pause IMPORT_ID [--json]` and `subsync resume IMPORT_ID [--json]`: workers stop starting an import's rows, and start them again. */
import type { Command } from 'commander';
import { cliActor } from '../audit/actor.js';
import { AUDIT_ACTIONS, recordAudit } from '../audit/trail.js';
import { pauseImport, resumeImport, type PauseResult } from '../import/control.js';
import { withRuntime } from './context.js';

export function register(program: Command): void {
  program
    .command('pause')
    .description('workers start no more rows of an import (requests already out finish) until `subsync resume`')
    .argument('<importId>', 'the import id')
    .option('--json', 'one JSON object instead of text')
    .action((importId: string, flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const result = await pauseImport({ store: runtime.store, queues: runtime.queues, redis: runtime.redis, logger: runtime.logger, notifier: runtime.notifier, actor: cliActor(runtime.config) }, importId);
        await recordAudit(runtime.redis, runtime.config, { actor: cliActor(runtime.config), action: AUDIT_ACTIONS.pause, target: importId, details: { before: result.before, changed: result.changed } });
        print(result, flags.json, result.changed ? `paused import ${importId}: no new row starts; requests already out finish; \`subsync resume ${importId}\` runs it on` : already(result, 'paused'));
      }),
    );
  program
    .command('resume')
    .description('run a paused import on (also one its canary paused, or whose canary still holds the rest back)')
    .argument('<importId>', 'the import id')
    .option('--json', 'one JSON object instead of text')
    .action((importId: string, flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const result = await resumeImport({ store: runtime.store, queues: runtime.queues, redis: runtime.redis, logger: runtime.logger }, importId);
        await recordAudit(runtime.redis, runtime.config, { actor: cliActor(runtime.config), action: AUDIT_ACTIONS.resume, target: importId, details: { before: result.before, changed: result.changed } });
        print(result, flags.json, result.changed ? `resumed import ${importId}: its rows run on` : already(result, 'running'));
      }),
    );
}

function already(result: PauseResult, state: string): string {
  return result.state === 'finished' ? `import ${result.importId} has already finished` : `import ${result.importId} is already ${state}`;
}

function print(result: PauseResult, json: boolean | undefined, text: string): void {
  process.stdout.write(json ? `${JSON.stringify(result)}\n` : `${text}\n`);
}
