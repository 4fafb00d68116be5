/** `subsync status [IMPORT_ID] [--json]`: the state the dashboard shows. */
import type { Command } from 'commander';
import { ImportNotFoundError, importStatus, type ImportStatus } from '../import/status.js';
import { sweepImport, type SweepReport } from '../import/sweep.js';
import { recentRollbacks, rollbackMessage } from '../store/rollback.js';
import { withRuntime } from './context.js';
import { feedView } from './import.js';
import { formatSeconds, turnText } from './progress.js';

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
        const statuses: Array<ImportStatus & { expiresAt: string | null; memoryBytes: number; sweep?: Pick<SweepReport, 'unsettled' | 'live' | 'requeued' | 'withoutCards' | 'finalizeQueued'> }> = [];
        for (const id of ids) {
          // One import asked for by id, unfinished: its rows that no job will run are queued again first.
          const swept = importId ? await sweepImport(runtime.store, runtime.queues, id) : undefined;
          const status = await importStatus(runtime.store, id, Date.now(), feedView(runtime));
          if (!status && importId) throw new ImportNotFoundError(importId);
          if (!status) continue;
          const { expiresAt, bytes } = await runtime.store.footprint(id);
          const sweep = swept && swept.state !== 'finished' && swept.state !== 'enqueuing'
            ? { unsettled: swept.unsettled, live: swept.live, requeued: swept.requeued, withoutCards: swept.withoutCards, finalizeQueued: swept.finalizeQueued }
            : undefined;
          statuses.push({ ...status, expiresAt: expiresAt === undefined ? null : new Date(expiresAt).toISOString(), memoryBytes: bytes, ...(sweep ? { sweep } : {}) });
        }
        // Redis lost acknowledged writes while one of these imports ran: said first, on stderr (stdout stays the statuses).
        const shown = new Set(statuses.map((s) => s.importId));
        for (const rollback of await recentRollbacks(runtime.redis, runtime.store)) {
          if (rollback.imports.some((id) => shown.has(id))) process.stderr.write(`subsync: ${rollbackMessage(rollback)}\n`);
        }
        if (flags.json) {
          for (const status of statuses) process.stdout.write(`${JSON.stringify(status)}\n`);
          return;
        }
        if (statuses.length === 0) process.stdout.write('no imports yet\n');
        for (const s of statuses) {
          const counts = Object.entries(s.counts).filter(([, n]) => n > 0).map(([k, n]) => `${k} ${n}`).join(', ') || 'nothing settled yet';
          const progress = s.finished ? 'settled' : s.total === undefined ? 'enqueuing' : `${s.settledRows}/${s.total} settled`;
          const state = runStateText(s, progress);
          const kept = `${s.expiresAt ? `expires ${s.expiresAt}` : 'kept until finished'}, ${formatBytes(s.memoryBytes)} in Redis`;
          process.stdout.write(`${s.importId}  ${s.kind}  ${s.file}  ${state}  ${counts}  ${s.rowsPerSecond} rows/s  ${kept}${s.resultsDir ? `  ${s.resultsDir}` : ''}\n`);
          if (s.schedule && !s.finished) {
            const eta = s.schedule.etaSeconds === undefined ? '' : `, ETA ${formatSeconds(s.schedule.etaSeconds)}`;
            const rate = s.schedule.rowsPerSecond === undefined ? '' : `, getting ${s.schedule.rowsPerSecond} rows/s`;
            const turn = turnText(s).trim() || (s.schedule.waiting ? 'rows waiting for their turn at the budget' : 'every row released to the workers');
            process.stdout.write(`  ${turn}${rate}${eta}\n`);
          }
          if (s.sweep && (s.sweep.requeued.length > 0 || s.sweep.withoutCards.length > 0)) {
            process.stdout.write(`  ${s.sweep.requeued.length} row(s) had no job that would run them and were queued again${s.sweep.withoutCards.length ? `; ${s.sweep.withoutCards.length} card row(s) had lost their card data and settled failed` : ''}\n`);
          }
          if (s.readBackSince) process.stdout.write(`  read-back mode since ${s.readBackSince}: Redis lost acknowledged writes while it ran, so its rows without an outcome read back before any create\n`);
          if (s.sweep?.finalizeQueued) process.stdout.write('  every row had settled and the results were not being written: queued again\n');
        }
      }),
    );
}

/** The run state beside the progress: paused (and why), cancelling, cancelled, a canary still holding the rest back. */
export function runStateText(s: ImportStatus, progress: string): string {
  if (s.runState === 'cancelled') return `cancelled, ${progress}`;
  if (s.runState === 'cancelling') return `cancelling (rows already sent finish), ${progress}`;
  if (s.runState === 'paused') return `PAUSED, ${progress}: ${s.runReason ?? 'paused'}`;
  if (s.canary?.holding) return `canary: the first ${s.canary.rows} rows run first, ${progress}`;
  return progress;
}

/** Bytes as a person reads them: 812 B, 40.2 KB, 3.1 MB. */
function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
