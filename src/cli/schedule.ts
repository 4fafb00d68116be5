/**
 * `subsync schedule export|list|remove`: the nightly export, one BullMQ job
 * scheduler under a fixed id (src/export/schedule.ts): registering it again,
 * from any process, replaces it rather than adding a second one.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { EXPORT_SCHEDULER_ID, ScheduleError, checkSchedule, listSchedules, removeSchedule, scheduleExport, type ExportSchedule } from '../export/schedule.js';
import { cliActor } from '../audit/actor.js';
import { AUDIT_ACTIONS, recordAudit } from '../audit/trail.js';
import { withRuntime } from './context.js';
import { exportOptions, requestOf, type ExportFlags } from './export.js';
import { parseNonEmpty } from './options.js';

interface ScheduleExportFlags extends Omit<ExportFlags, 'wait'> {
  cron: string;
  tz: string;
}

/** Checks the pattern and zone while parsing, so a bad one is a usage error (exit 64) naming the flag. */
function checked(check: (value: string) => void) {
  return (value: string): string => {
    const text = parseNonEmpty(value).trim();
    try {
      check(text);
    } catch (error) {
      if (error instanceof ScheduleError) throw new InvalidArgumentError(error.message);
      throw error;
    }
    return text;
  };
}

export function register(program: Command): void {
  const schedule = program.command('schedule').description('the nightly export: a cron schedule on the control queue, one however often it is registered');

  exportOptions(
    schedule
      .command('export')
      .description('create or replace the export schedule')
      .requiredOption('--cron <pattern>', 'cron pattern: 5 fields (minute first), or 6 with seconds first; e.g. "0 2 * * *"', checked((p) => checkSchedule(p, 'UTC')))
      .option('--tz <zone>', 'IANA time zone the pattern is read in', checked((z) => checkSchedule('0 0 * * *', z)), 'UTC'),
  )
    .option('--json', 'JSON instead of text')
    .action((flags: ScheduleExportFlags) =>
      withRuntime(async (runtime) => {
        const saved = await scheduleExport(runtime.queues.control, { pattern: flags.cron, tz: flags.tz, request: requestOf(flags) });
        await recordAudit(runtime.redis, runtime.config, {
          actor: cliActor(runtime.config),
          action: AUDIT_ACTIONS.scheduleSet,
          target: saved.id,
          details: { pattern: saved.pattern, tz: saved.tz, ...saved.request },
        });
        printSchedules([saved], flags.json, 'scheduled');
      }),
    );

  schedule
    .command('list')
    .description('show the export schedule and its next run')
    .option('--json', 'one JSON object per line instead of text')
    .action((flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const schedules = await listSchedules(runtime.queues.control);
        if (schedules.length === 0 && !flags.json) process.stdout.write('no export schedule\n');
        printSchedules(schedules, flags.json);
      }),
    );

  schedule
    .command('remove')
    .description('remove the export schedule (exports already queued still run)')
    .action(() =>
      withRuntime(async (runtime) => {
        const removed = await removeSchedule(runtime.queues.control, EXPORT_SCHEDULER_ID);
        if (removed) await recordAudit(runtime.redis, runtime.config, { actor: cliActor(runtime.config), action: AUDIT_ACTIONS.scheduleRemove, target: EXPORT_SCHEDULER_ID });
        process.stdout.write(removed ? `removed schedule ${EXPORT_SCHEDULER_ID}\n` : 'no export schedule to remove\n');
      }),
    );
}

function printSchedules(schedules: readonly ExportSchedule[], json: boolean | undefined, verb?: string): void {
  for (const s of schedules) {
    if (json) {
      process.stdout.write(`${JSON.stringify({ ...s, next: s.next === undefined ? null : new Date(s.next).toISOString() })}\n`);
      continue;
    }
    const { format, gzip, outDir, keep } = s.request;
    const options = [format + (gzip ? ' gzip' : ''), outDir ? `out ${outDir}` : '', keep ? `keep ${keep}` : ''].filter(Boolean).join(', ');
    const next = s.next === undefined ? 'unknown' : new Date(s.next).toISOString();
    process.stdout.write(`${verb ? `${verb}: ` : ''}${s.id}  "${s.pattern}" ${s.tz}  next ${next}  (${options})\n`);
  }
}
