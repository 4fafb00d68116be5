/**
 * `subsync import FILE`: validates and enqueues (or, when another command is
 * enqueuing the same bytes, says so and leaves it to it); with `--wait`,
 * follows the import to its end and exits 0 (every row succeeded), 3 (some did not) or 2
 * (the file was rejected).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { describeEstimate } from '../customers/estimate.js';
import { createBudget } from '../redis/budget.js';
import { openApi } from '../runtime.js';
import { requireApiUrl } from '../config.js';
import { FileRejectedError } from '../csv/errors.js';
import { enqueueLeaseKey, importFile, type ImportResult } from '../import/producer.js';
import { ImportNotFoundError, importStatus, type FeedView, type ImportStatus } from '../import/status.js';
import { sweepImport } from '../import/sweep.js';
import { holdsCardData } from '../queue/requeue.js';
import { NO_CARD_KEY_SUFFIX } from '../workers/rowWorker.js';
import { WAIT_DEFAULTS } from '../policy.js';
import type { Runtime } from '../runtime.js';
import { withRuntime } from './context.js';
import { ImportPausedError, ImportStalledError, RowsDidNotSucceedError } from './exitCodes.js';
import { parseNonEmpty } from './options.js';
import { createProgress } from './progress.js';
import { IMPORT_PRIORITIES, ImportPrioritySchema, type ImportPriority } from '../queue/feeder.js';

export interface ImportFlags {
  kind?: string;
  map?: string;
  match?: string;
  expiryFormat: 'MMYY' | 'YYMM';
  encoding?: string;
  attempts: number;
  dryRun?: boolean;
  wait?: boolean;
  force?: boolean;
  allOrNothing?: boolean;
  allowDuplicates?: boolean;
  sendEmptyPasswords?: boolean;
  acceptMisdecodedText?: boolean;
  /** `--canary N`: the first N rows run first. */
  canary?: number;
  /** `--canary-max-failures P`: a count, or a percentage of N ("10%"); default 0. */
  canaryMaxFailures?: CanaryBound;
  json?: boolean;
  /** Its weight in the turn of imports sharing the budget. */
  priority?: ImportPriority;
}

/** A canary's bound as given: a count of rows, or a percentage of the canary's rows. */
export type CanaryBound = { count: number } | { percent: number };

function parseCanary(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a whole number of rows, 1 or more');
  return n;
}

function parseCanaryBound(value: string): CanaryBound {
  const percent = /^(\d+(?:\.\d+)?)%$/.exec(value.trim());
  if (percent) {
    const p = Number(percent[1]);
    if (p > 100) throw new InvalidArgumentError('expected a percentage from 0% to 100%');
    return { percent: p };
  }
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected a count of rows (0 or more) or a percentage such as 10%');
  return { count: n };
}

/** The most canary rows that may fail before the import pauses: a percentage of the canary rounded down. */
export function canaryMaxFailures(rows: number, bound: CanaryBound | undefined): number {
  if (bound === undefined) return 0;
  return 'count' in bound ? bound.count : Math.floor((rows * bound.percent) / 100);
}

function parseAttempts(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 100) throw new InvalidArgumentError('expected a whole number from 1 to 100');
  return n;
}
export function parsePriority(value: string): ImportPriority {
  const parsed = ImportPrioritySchema.safeParse(value);
  if (!parsed.success) throw new InvalidArgumentError(`expected ${IMPORT_PRIORITIES.join(', ')}`);
  return parsed.data;
}
function parseExpiryFormat(value: string): 'MMYY' | 'YYMM' {
  if (value !== 'MMYY' && value !== 'YYMM') throw new InvalidArgumentError('expected MMYY or YYMM');
  return value;
}

export function register(program: Command): void {
  program
    .command('import')
    .description('validate a CSV file and queue its rows; --wait follows it to the end')
    .argument('<file>', 'the CSV file')
    .option('--kind <kind>', 'customers, signups or cards (default: from the inbox folder or the headers)')
    .option('--map <file>', 'JSON {"Their Column": "Path"} renaming your columns', parseNonEmpty)
    .option('--match <field>', 'customers: update the customer whose FIELD matches (searched by last name), else create', parseNonEmpty)
    .option('--expiry-format <format>', 'order of ExpirationDate: MMYY or YYMM', parseExpiryFormat, 'MMYY')
    .option('--encoding <name>', 'read a file that is not UTF-8 in this encoding, e.g. windows-1252, macintosh, utf-16le', parseNonEmpty)
    .option('--attempts <n>', 'attempts per row for transient failures', parseAttempts, 8)
    .option('--dry-run', 'validate everything (and read each offer of a sign-ups file); enqueue nothing')
    .option('--wait', 'show progress until every row has settled; exit 0 all succeeded, 3 some did not')
    .option('--force', 'import identical bytes again under a new import id')
    .option('--all-or-nothing', 'enqueue nothing if any row is invalid')
    .option('--allow-duplicates', 'send rows about a person the service or an earlier row already holds (by default they settle as exists or duplicate)')
    .option('--send-empty-passwords', 'let an update file without a Password column send passwords empty (the service replaces the whole record)')
    .option('--accept-misdecoded-text', 'take text that looks like UTF-8 read as Windows-1252 and saved again (Ã« for ë) as written')
    .option('--priority <level>', 'high, normal or low: its weight (4, 2, 1) when imports take turns at the rate', parsePriority, 'normal')
    .option('--canary <n>', 'run the first N rows first; the rest waits until they have settled, and the import pauses itself when more of them than --canary-max-failures did not succeed', parseCanary)
    .option('--canary-max-failures <p>', 'with --canary: failures allowed among its rows, a count (3) or a percentage of N (10%); default 0', parseCanaryBound)
    .option('--json', 'one JSON object per line instead of text')
    .action(async (file: string, flags: ImportFlags) => {
      await withRuntime((runtime) => runImport(runtime, file, flags));
    });
}

export async function runImport(runtime: Runtime, file: string, flags: ImportFlags, out: NodeJS.WriteStream = process.stdout): Promise<ImportStatus | undefined> {
  const print = (text: string, data: Record<string, unknown>): void => {
    out.write(flags.json ? `${JSON.stringify(data)}\n` : `${text}\n`);
  };
  if (runtime.redisLoss) process.stderr.write(`subsync: ${runtime.redisLoss}\n`);
  // A dry run reads offers and the end of the customer listing: from the fleet's budget, like any request.
  const budget = createBudget(runtime.redis, runtime.store.keys, { rate: runtime.config.rate });
  const api = flags.dryRun && runtime.config.apiUrl ? openApi(runtime, requireApiUrl(runtime.config), budget) : undefined;
  // (The client closes with the runtime.)
  const result: ImportResult = await importFile(
    {
      file,
      kind: flags.kind,
      mapFile: flags.map,
      match: flags.match,
      expiryFormat: flags.expiryFormat,
      encoding: flags.encoding,
      attempts: flags.attempts,
      dryRun: flags.dryRun,
      force: flags.force,
      allOrNothing: flags.allOrNothing,
      allowDuplicates: flags.allowDuplicates,
      sendEmptyPasswords: flags.sendEmptyPasswords,
      acceptMisdecodedText: flags.acceptMisdecodedText,
      priority: flags.priority,
      ...(flags.canary === undefined ? {} : { canary: { rows: flags.canary, maxFailures: canaryMaxFailures(flags.canary, flags.canaryMaxFailures) } }),
    },
    {
      store: runtime.store,
      queues: runtime.queues,
      keyring: runtime.keyring,
      api,
      customers: runtime.customers,
      refresh: { budget, redis: runtime.redis, prefix: runtime.config.queuePrefix },
      journal: runtime.journal,
      redis: runtime.redis,
      notifier: runtime.notifier,
      logger: runtime.logger,
      // The id comes first, before the rows are read: a long file is traceable at once.
      onImportId: (importId, kind) => print(`import id: ${importId}`, { importId, kind }),
    },
  );

  switch (result.outcome) {
    case 'already-imported':
      print(`${file} was already imported (same bytes, kind ${result.kind}); \`subsync status ${result.importId}\` shows it, --force imports it again`, {
        importId: result.importId,
        alreadyImported: true,
      });
      break;
    case 'in-progress':
      print(`another command is importing this file (import id ${result.importId}); \`subsync status ${result.importId}\` follows it`, {
        importId: result.importId,
        inProgress: true,
      });
      // The other command may not have written the import's record yet: --wait follows it once it has.
      if (flags.wait) await untilRecorded(runtime, result.importId);
      break;
    case 'dry-run':
    case 'rejected':
    case 'enqueued': {
      for (const error of result.errors) print(`  ${error.message}`, { importId: result.importId, row: error.row, column: error.column, rule: error.rule, error: error.message });
      const invalidNote = result.invalid > result.errors.length ? ` (first ${result.errors.length} errors shown)` : '';
      const duplicateNote = result.duplicates > 0 ? `, ${result.duplicates} duplicate${result.duplicates === 1 ? '' : 's'} of earlier rows (not sent)` : '';
      print(`${result.rows} rows, ${result.invalid} invalid${invalidNote}${duplicateNote}`, {
        importId: result.importId,
        rows: result.rows,
        invalid: result.invalid,
        duplicates: result.duplicates,
      });
      if (result.outcome === 'dry-run') {
        for (const offer of result.offers) if (offer.problem) print(`  ${offer.problem}`, { importId: result.importId, offerCode: offer.offerCode, problem: offer.problem });
        if (flags.dryRun && !api && result.kind === 'signups') print('  offers not checked: SUBSYNC_API_URL is not set', { importId: result.importId, offersChecked: false });
        print(describeEstimate(result.estimate, runtime.config.rate), { importId: result.importId, plan: result.estimate });
        for (const note of result.estimate.notes) print(`  ${note}`, { importId: result.importId, planNote: note });
        print('dry run: nothing was enqueued', { importId: result.importId, dryRun: true });
        if (result.invalid > 0 || result.offers.some((o) => o.problem)) throw new FileRejectedError(file, ['the dry run found problems (above)']);
        return undefined;
      }
      if (result.outcome === 'rejected') throw new FileRejectedError(file, [`--all-or-nothing: ${result.invalid} invalid row(s); nothing was enqueued`]);
      print(`${result.rows - result.invalid - result.duplicates} rows queued${result.resumed ? ' (resumed an interrupted enqueue)' : ''}`, { importId: result.importId, queued: result.rows - result.invalid - result.duplicates });
      if (flags.canary !== undefined) {
        const bound = canaryMaxFailures(flags.canary, flags.canaryMaxFailures);
        print(`canary: the first ${flags.canary} rows run first; the rest waits until they have settled, and the import pauses itself if more than ${bound} of them do not succeed`, {
          importId: result.importId,
          canary: { rows: flags.canary, maxFailures: bound },
        });
      }
    }
  }
  if (!flags.wait) return undefined;
  const status = await waitForImport(runtime, result.importId, flags.json ? undefined : process.stderr, {
    // With --json, a line of progress (its turn at the budget included) every few seconds.
    ...(flags.json ? { onStatus: jsonProgress((line) => out.write(line)) } : {}),
  });
  const summary = Object.entries(status.counts).filter(([, n]) => n > 0).map(([s, n]) => `${s} ${n}`).join(', ');
  print(`settled: ${summary}`, { importId: result.importId, settled: true, counts: status.counts });
  if (status.resultsDir) print(`results: ${status.resultsDir}`, { importId: result.importId, resultsDir: status.resultsDir });
  if (!status.allSucceeded) {
    const total = status.total ?? 0;
    const cancelled = status.counts.cancelled;
    const failed = total - status.succeeded - cancelled;
    const parts = [
      ...(cancelled > 0 ? [`the import was cancelled: ${cancelled} of ${total} rows were not sent (see ${status.resultsDir ?? 'the results'}/unprocessed.csv)`] : []),
      ...(failed > 0 || cancelled === 0 ? [`${failed} of ${total} rows did not succeed: see ${status.resultsDir ?? 'the results'}/errors.csv`] : []),
    ];
    throw new RowsDidNotSucceedError(parts.join('; '));
  }
  return status;
}

/**
 * Waits until the import another command is enqueuing has its record in
 * Redis (that command took the lease before writing it). When the lease is
 * gone and no record came, that command ended before it queued anything.
 */
async function untilRecorded(runtime: Runtime, importId: string, pollMs = WAIT_DEFAULTS.pollMs): Promise<void> {
  for (;;) {
    if (await runtime.store.getImport(importId)) return;
    if ((await runtime.redis.exists(enqueueLeaseKey(runtime.store.keys, importId))) === 0 && !(await runtime.store.getImport(importId))) {
      throw new ImportNotFoundError(importId, `the other command importing this file (import id ${importId}) ended before it queued anything: run the import again`);
    }
    await sleep(pollMs);
  }
}

/** How `import --wait` decides that nothing will run an import's remaining rows (defaults in src/policy.ts). */
export interface WaitOptions {
  pollMs?: number;
  /** With no row settled for this long, the rows are swept (stranded rows queued again) and the fleet looked at. */
  quietMs?: number;
  /** With no worker able to run the rows for this long, the wait ends with ImportStalledError. */
  giveUpMs?: number;
  /** Told of each status read. */
  onStatus?: (status: ImportStatus) => void;
}

/** `--wait --json`'s progress: a JSON line (rows, rate, ETA and its turn at the budget) at most every `everyMs`. */
export function jsonProgress(write: (line: string) => void, everyMs = 5_000): (status: ImportStatus) => void {
  let last = Date.now();
  return (status) => {
    const now = Date.now();
    if (now - last < everyMs || status.finished) return;
    last = now;
    const { importId, settledRows, total, rowsPerSecond, schedule } = status;
    write(`${JSON.stringify({ importId, progress: { settledRows, total, rowsPerSecond, ...(schedule ? { schedule } : {}) } })}\n`);
  };
}

/**
 * Polls the import until its results are written, drawing progress on
 * `progressTo`. It never waits for ever: when no row settles for a while it
 * sweeps the import (rows whose jobs are gone are queued again) and looks at
 * the fleet; when no worker that can run what remains is connected for
 * `giveUpMs`, it ends, saying what to start. An import whose record vanished
 * ends with ImportNotFoundError.
 */
export async function waitForImport(runtime: Runtime, importId: string, progressTo: NodeJS.WriteStream | undefined, options: WaitOptions | number = {}): Promise<ImportStatus> {
  const { pollMs, quietMs, giveUpMs, onStatus } = { ...WAIT_DEFAULTS, ...(typeof options === 'number' ? { pollMs: options } : options) };
  const progress = progressTo ? createProgress(progressTo) : undefined;
  let settledRows = -1;
  let lastProgress = Date.now();
  let lastLook = 0;
  let noRunnerSince: number | undefined;
  // Times the sweep found the results unwritten with no job writing them: writing them keeps failing.
  let finalizeRequeued = 0;
  try {
    for (;;) {
      const status = await importStatus(runtime.store, importId, Date.now(), feedView(runtime));
      if (!status) {
        throw new ImportNotFoundError(
          importId,
          `import ${importId} vanished from Redis while it ran: its keys were deleted or lost (Redis flushed, or restarted without persistence); its rows may have been sent: import the file again from the machine that started it (its creates then read back before sending)`,
        );
      }
      progress?.update(status);
      onStatus?.(status);
      if (status.finished) return status;
      if (status.runState === 'paused') {
        throw new ImportPausedError(`import ${importId} is paused: ${status.runReason ?? 'paused'}${status.runReason?.includes('subsync resume') ? '' : `; \`subsync resume ${importId}\` runs it on`}`);
      }
      const now = Date.now();
      if (status.settledRows !== settledRows) {
        settledRows = status.settledRows;
        lastProgress = now;
        noRunnerSince = undefined;
      }
      if (now - lastProgress >= quietMs && now - lastLook >= Math.min(quietMs, giveUpMs)) {
        lastLook = now;
        const stuck = await whyStuck(runtime, importId, status, () => ++finalizeRequeued);
        if (stuck === undefined) noRunnerSince = undefined;
        else {
          noRunnerSince ??= now;
          if (now - noRunnerSince >= giveUpMs) throw new ImportStalledError(stuck);
        }
      }
      await sleep(pollMs);
    }
  } finally {
    progress?.end();
  }
}

/** Where the feeder keeps the turn of imports, for the schedule of a status. */
export const feedView = (runtime: Runtime): FeedView => ({ redis: runtime.redis, prefix: runtime.config.queuePrefix, rate: runtime.config.rate });

/** Sweeps a quiet import, then says why nothing will run what remains of it, or undefined when something will. */
async function whyStuck(runtime: Runtime, importId: string, status: ImportStatus, finalizeRequeued: () => number): Promise<string | undefined> {
  const { store, queues } = runtime;
  const report = await sweepImport(store, queues, importId);
  if (!report || report.state === 'finished' || report.state === 'enqueuing') return undefined;
  const waiting = `the rows wait in Redis and nothing is lost; \`subsync status ${importId}\` follows the import, and \`subsync import FILE --wait\` waits for it again`;
  if (report.finalizeQueued && finalizeRequeued() >= 3) {
    return `every row of import ${importId} has an outcome, but writing its results keeps failing (the worker's log says why: a full or unwritable ${runtime.config.dataDir}/results, say); fix that, and \`subsync status ${importId}\` queues the writing again`;
  }
  if (report.state === 'settled') {
    if ((await queues.control.getWorkers()).length > 0) return undefined;
    return `every row of import ${importId} has an outcome, but no worker runs control jobs to write its results (all run with --no-control): start \`subsync worker\` without --no-control; ${waiting}`;
  }
  const workers = await queues.rows.getWorkers();
  const record = await store.getImport(importId);
  const cards = record !== undefined && holdsCardData(record);
  const able = cards ? workers.filter((w) => !(typeof w.rawname === 'string' && w.rawname.endsWith(NO_CARD_KEY_SUFFIX))) : workers;
  if (able.length > 0) return undefined;
  const remaining = (status.total ?? 0) - status.settledRows;
  const rows = remaining === 1 ? `1 row of import ${importId}` : `${remaining} rows of import ${importId}`;
  if (workers.length > 0) {
    return `${rows} ${remaining === 1 ? 'holds' : 'hold'} card data, and every worker running lacks SUBSYNC_CARD_KEY (they leave such rows to workers that have it): start a worker with the key the import was sealed with; ${waiting}`;
  }
  return `${rows} ${remaining === 1 ? 'has' : 'have'} no outcome, and no subsync worker is running against this Redis (prefix ${runtime.config.queuePrefix}): start one (\`subsync worker\` or \`subsync start\`); ${waiting}`;
}
