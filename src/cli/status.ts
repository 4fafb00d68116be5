/** `subsync status [IMPORT_ID] [--json]`: the state the dashboard shows. */
import type { Command } from 'commander';
import { importStatus } from '../import/status.js';
import { withRuntime } from './context.js';

export function register(program: Command): void {
  program
    .command('status')
    .description('counts by status of one import, or the recent imports')
    .argument('[importId]', 'an import id (default: the 20 most recent imports)')
    .option('--json', 'JSON instead of text')
    .action((importId: string | undefined, flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        if (runtime.redisLoss) process.stderr.write(`subsync: ${runtime.redisLoss}\n`);
        const ids = importId ? [importId] : await runtime.store.listImportIds(20);
        const statuses = [];
        for (const id of ids) {
          const status = await importStatus(runtime.store, id);
          if (!status && importId) throw new Error(`no import ${importId} in Redis`);
          if (status) statuses.push(status);
        }
        if (flags.json) {
          for (const status of statuses) process.stdout.write(`${JSON.stringify(status)}\n`);
          return;
        }
        if (statuses.length === 0) process.stdout.write('no imports yet\n');
        for (const s of statuses) {
          const counts = Object.entries(s.counts).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(', ') || 'nothing settled yet';
          const state = s.finished ? 'settled' : s.total === undefined ? 'enqueuing' : `${s.settledRows}/${s.total} settled`;
          process.stdout.write(`${s.importId}  ${s.kind}  ${s.file}  ${state}  ${counts}  ${s.rowsPerSecond} rows/s${s.resultsDir ? `  ${s.resultsDir}` : ''}\n`);
        }
      }),
    );
}
