/** `subsync audit [--json] [--limit N] [--offset N]`: the audit trail, newest first. */
import { InvalidArgumentError, type Command } from 'commander';
import { expiresAt, listAudit, type AuditEntry } from '../audit/trail.js';
import { withRuntime } from './context.js';

/** Entries printed unless `--limit` says otherwise. */
const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 100_000;

function parseCount(min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || n < min || n > max) throw new InvalidArgumentError(`expected a whole number from ${min} to ${max}`);
    return n;
  };
}

interface AuditFlags {
  json?: boolean;
  limit: number;
  offset: number;
}

export function register(program: Command): void {
  program
    .command('audit')
    .description('the audit trail, newest first: who retried, edited, cancelled, paused or changed a schedule, from the dashboard or the command line, and when')
    .option('--json', 'one JSON object per line (id, actor, role, action, target, at, details, expiresAt, retentionDays)')
    .option('--limit <n>', `entries to print (default ${DEFAULT_LIMIT})`, parseCount(1, MAX_LIMIT), DEFAULT_LIMIT)
    .option('--offset <n>', 'skip this many of the newest first', parseCount(0, MAX_LIMIT), 0)
    .action((flags: AuditFlags) =>
      withRuntime(async (runtime) => {
        const page = await listAudit(runtime.redis, runtime.config, { limit: flags.limit, offset: flags.offset });
        if (flags.json) {
          for (const entry of page.entries) {
            process.stdout.write(`${JSON.stringify({ ...entry, expiresAt: expiresAt(entry, runtime.config), retentionDays: page.retentionDays })}\n`);
          }
          return;
        }
        process.stdout.write(`audit trail: ${page.total} entr${page.total === 1 ? 'y' : 'ies'}, each kept ${page.retentionDays} days (SUBSYNC_RETENTION_DAYS)\n`);
        for (const entry of page.entries) process.stdout.write(`${line(entry)}\n`);
        const shown = flags.offset + page.entries.length;
        if (shown < page.total) process.stdout.write(`(${page.total - shown} older: --offset ${shown})\n`);
      }),
    );
}

function line(entry: AuditEntry): string {
  const who = entry.role === undefined ? entry.actor : `${entry.actor} (${entry.role})`;
  const details = entry.details === undefined ? '' : `  ${JSON.stringify(entry.details)}`;
  return `${entry.at}  ${who}  ${entry.action}  ${entry.target}${details}`;
}
