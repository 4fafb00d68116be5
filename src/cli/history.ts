/** `subsync history [--json] [--limit N] [--offset N] [--state S]`: every import within retention, newest first. */
import { InvalidArgumentError, type Command } from 'commander';
import { IMPORT_STATES, importHistory, isImportState, type HistoryEntry, type ImportState } from '../import/history.js';
import { ROW_STATUSES } from '../outcomes.js';
import { withRuntime } from './context.js';
import { parseNonNegativeInt } from './options.js';

function parseState(value: string): ImportState {
  if (!isImportState(value)) throw new InvalidArgumentError(`expected one of: ${IMPORT_STATES.map((s) => `"${s}"`).join(', ')}`);
  return value;
}

function parseLimit(value: string): number {
  const n = parseNonNegativeInt(value);
  if (n < 1) throw new InvalidArgumentError('expected a whole number, 1 or more');
  return n;
}

/** Seconds as a person reads a wait: 45 s, 12 min, 3 h 05 min. */
export function formatDuration(seconds: number): string {
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  const minutes = Math.round(seconds / 60);
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min`;
}

/** One import as a line of text. */
export function historyLine(e: HistoryEntry): string {
  const counts = ROW_STATUSES.filter((s) => e.counts[s] > 0).map((s) => `${s} ${e.counts[s]}`).join(', ') || 'nothing settled yet';
  const progress = `${e.settled}/${e.total ?? '?'}`;
  const eta = e.etaSeconds === null ? '' : `  ETA ${formatDuration(e.etaSeconds)}`;
  return `${e.importId}  ${e.createdAt.replace('T', ' ').slice(0, 19)}  ${e.kind}  ${e.file}  ${e.state}  ${progress}  ${counts}  ${e.rowsPerSecond} rows/s${eta}\n`;
}

export function register(program: Command): void {
  program
    .command('history')
    .description('every import Redis still holds, newest first: file, kind, state, counts by outcome, rows/s, and an ETA while it runs')
    .option('--json', 'one JSON object per import, one per line')
    .option('--limit <n>', 'imports to list', parseLimit, 50)
    .option('--offset <n>', 'imports to skip first (the next page)', parseNonNegativeInt, 0)
    .option('--state <state>', `only imports in this state: ${IMPORT_STATES.join(', ')}`, parseState)
    .action((flags: { json?: boolean; limit: number; offset: number; state?: ImportState }) =>
      withRuntime(async (runtime) => {
        const page = await importHistory(runtime.store, { limit: flags.limit, offset: flags.offset, state: flags.state });
        if (flags.json) {
          for (const entry of page.imports) process.stdout.write(`${JSON.stringify(entry)}\n`);
          return;
        }
        if (page.imports.length === 0) process.stdout.write(flags.state ? `no ${flags.state} imports\n` : 'no imports\n');
        for (const entry of page.imports) process.stdout.write(historyLine(entry));
        if (page.nextOffset !== null) process.stdout.write(`more: subsync history --offset ${page.nextOffset}${flags.state ? ` --state "${flags.state}"` : ''}${flags.limit === 50 ? '' : ` --limit ${flags.limit}`}\n`);
      }),
    );
}
