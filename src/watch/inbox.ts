/**
 * The inbox watcher (`subsync watch`): takes files
 * dropped into the inbox once they are complete, imports each once, and moves
 * it on when its import settles.
 *
 * A file's life, one folder per step (see folders.ts):
 * 1. `inbox/<kind>/x.csv` (or `inbox/x.csv`, its kind read from its headers):
 *    taken once its size and mtime have held for the settle time (default
 *    5 s: a slow copy pauses) and it ends with a whole record (complete.ts);
 *    dot-files and `*.part` are never taken. Taking is a rename into
 *    `processing/<kind>/`, so no file is taken twice. The size, mtime and
 *    sha256 at the take are kept: a file that differs from them before its
 *    import reads it, while the import reads it, or before it moves to
 *    done/ is refused into failed/ (it changed while being imported).
 * 2. `processing/<kind>/x.csv`: imported with `importFile`. Its import id is
 *    the hash of its bytes and kind, so importing it again after a crash
 *    resumes an interrupted enqueue or finds it already imported: a file found
 *    here at start is resumed, never lost or doubled.
 * 3. when the import's results are written: `done/x.csv`; a file holding card
 *    data (signups, cards) is deleted from there after the card retention
 *    (default at once). A file rejected as a whole goes to `failed/x.csv`
 *    (mode 0600) with `failed/x.csv.error.txt` saying why (0600, card-number
 *    shaped digits masked); a rejected file that holds card data (its kind, or
 *    a Luhn-valid number anywhere in it) is deleted instead, only its error
 *    file kept: card numbers are never kept in clear. failed/ is emptied of
 *    files older than its retention (default 30 days). A name already taken
 *    in `done/` or `failed/` gets a timestamp suffix.
 *
 * The watcher keeps no state of its own beyond the folders and Redis: what it
 * holds in memory (sizes seen, import ids) is recomputed after a restart.
 * Polling (readdir on an interval) rather than fs.watch, which misses events
 * on network and container volumes. Run one watcher per inbox; for throughput,
 * run more workers.
 */
import { statSync } from 'node:fs';
import { chmod, readFile, rm, stat, utimes } from 'node:fs/promises';
import path from 'node:path';
import pLimit from 'p-limit';
import { cleanHeader, detectKind, resolvePath } from '../csv/columns.js';
import { ColumnMapError, CsvFormatError, FileRejectedError } from '../csv/errors.js';
import { openCsv, readHeaders } from '../csv/reader.js';
import { importFile } from '../import/producer.js';
import type { ImportPriority } from '../queue/feeder.js';
import { inboxPausedSince } from '../import/runState.js';
import { importStatus, type ImportStatus } from '../import/status.js';
import { IMPORT_KINDS, type ImportKind } from '../outcomes.js';
import type { Runtime } from '../runtime.js';
import { inspectFile } from './complete.js';
import { containsCardNumber, scrubCardNumbers } from './scrub.js';
import { createFolders, freePath, isCode, kindFolder, listFiles, moveFile, watchFolders, writeTextFile, type FolderFile, type WatchFolders } from './folders.js';
import { SubsyncError } from '../errors.js';

/** How often the folders are read when not told. */
export const DEFAULT_POLL_MS = 1_000;
/** After an unexpected error (Redis away, a file unreadable), how long before the file is tried again. */
export const DEFAULT_RETRY_MS = 10_000;

/** Owner-only: what failed/ keeps may hold personal data. */
const PRIVATE_MODE = 0o600;
const ERROR_SUFFIX = '.error.txt';
const DAY_MS = 86_400_000;

/** Kinds whose files hold card numbers. */
const CARD_KINDS: ReadonlySet<ImportKind> = new Set(['signups', 'cards']);

export interface WatcherOptions {
  /** The process's runtime: the import store and queues, the card keyring, the import journal, the logger, `config.dataDir`. */
  runtime: Pick<Runtime, 'config' | 'store' | 'queues' | 'keyring' | 'journal' | 'logger'>;
  /** The inbox folder. Default `<dataDir>/inbox`; processing/, done/ and failed/ stay under the data dir. */
  inbox?: string;
  /** Milliseconds between two readings of the folders. Default {@link DEFAULT_POLL_MS}. */
  pollMs?: number;
  /** How long a file's size and mtime must hold before it is taken. Default `config.inboxSettleMs`. */
  settleMs?: number;
  /** The clock the settle time is measured on (tests move it). Default `Date.now`. */
  now?: () => number;
  /** How long a processed file holding card data stays in done/, in milliseconds. Default 0: deleted at once. */
  cardRetentionMs?: number;
  /** How long files stay in failed/ (by the time they got there), in milliseconds. Default `config.failedRetentionDays`. */
  failedRetentionMs?: number;
  /** Milliseconds before a file whose import failed unexpectedly is tried again. Default {@link DEFAULT_RETRY_MS}. */
  retryMs?: number;
  /** The priority of this inbox's imports in the turn of imports sharing the budget (src/queue/feeder.ts). Default normal. */
  priority?: ImportPriority;
}

export interface Watcher {
  readonly folders: WatchFolders;
  /** Runs one pass over the folders now (the timer runs them too); passes never overlap. */
  scan(): Promise<void>;
  /** Stops polling and waits for an enqueue under way; an import still settling is picked up again at the next start. */
  close(): Promise<void>;
}

/** What the watcher knows of a file in processing/, by its path. */
type Tracked =
  | { state: 'enqueuing' }
  | { state: 'waiting'; importId: string }
  | { state: 'rejected'; reason: string }
  | { state: 'retry'; at: number };

/** A file's size and mtime at the last poll, and since when they have held. */
interface Stamp {
  size: number;
  mtimeMs: number;
  since: number;
  /** Read, and found not to end with a whole record: not read again (nor logged) until it changes. */
  incomplete?: boolean;
}

/** What a file in processing/ was when taken: anything else is a file that changed while being imported. */
interface TakenAs {
  size: number;
  mtimeMs: number;
  sha256: string;
}

/** The file in processing/ is not the one taken. */
class FileChangedError extends SubsyncError {
  readonly code = 'FILE_CHANGED';
}

/**
 * Creates the folders, makes a first pass (which resumes whatever lies in
 * processing/), and polls until closed.
 */
export async function startWatcher(options: WatcherOptions): Promise<Watcher> {
  const { store, queues, keyring, journal, config } = options.runtime;
  const log = options.runtime.logger.child({ component: 'watch' });
  const folders = watchFolders(config.dataDir, options.inbox);
  const pollMs = options.pollMs ?? DEFAULT_POLL_MS;
  const retryMs = options.retryMs ?? DEFAULT_RETRY_MS;
  const cardRetentionMs = options.cardRetentionMs ?? 0;
  const settleMs = options.settleMs ?? config.inboxSettleMs;
  const failedRetentionMs = options.failedRetentionMs ?? config.failedRetentionDays * DAY_MS;
  const clock = options.now ?? Date.now;
  await createFolders(folders);

  let seen = new Map<string, Stamp>();
  /** Files in processing/, by path: what they were when taken (or first seen there, after a restart). */
  const takenAs = new Map<string, TakenAs>();
  const tracked = new Map<string, Tracked>();
  /** done/ files already looked at: when each is due for deletion, or never (no card data). */
  const doneFiles = new Map<string, number | undefined>();
  /** failed/ files already checked for card data and mode (by name; a new file of the same name is checked again by its mtime). */
  const failedChecked = new Map<string, number>();
  // One enqueue at a time, in the order files were taken: enqueueing is bound
  // by Redis round trips, and the operator sees files start in drop order.
  const enqueueLimit = pLimit(1);
  const enqueues = new Set<Promise<void>>();

  /** Step 1: take every inbox file that has stopped changing and ends with a whole record. */
  async function takeCompleteFiles(): Promise<void> {
    const candidates: Array<{ file: FolderFile; kind: ImportKind | undefined }> = [];
    for (const kind of IMPORT_KINDS) for (const file of await listFiles(kindFolder(folders.inbox, kind))) candidates.push({ file, kind });
    for (const file of await listFiles(folders.inbox)) candidates.push({ file, kind: undefined });
    const next = new Map<string, Stamp>();
    const now = clock();
    for (const { file, kind } of candidates) {
      const before = seen.get(file.path);
      if (before?.size !== file.size || before.mtimeMs !== file.mtimeMs) {
        // New, or changed since the last poll: the settle time starts again.
        next.set(file.path, { size: file.size, mtimeMs: file.mtimeMs, since: now });
        if (!before) log.debug({ file: file.path, settleMs }, 'inbox file seen; taken once unchanged for the settle time and ending with a whole record');
        continue;
      }
      next.set(file.path, before);
      // Unchanged on two polls at least, and for the settle time.
      if (now - before.since < settleMs) continue;
      await guarded(file.path, () => takeIfComplete(file, kind, before));
    }
    seen = next;
  }

  async function takeIfComplete(file: FolderFile, kind: ImportKind | undefined, stamp: Stamp): Promise<void> {
    if (stamp.incomplete) return;
    const inspection = await inspectFile(file.path);
    const after = await stat(file.path);
    // Written to while it was read: the next polls start its settle time again.
    if (inspection.size !== file.size || after.size !== file.size || after.mtimeMs !== file.mtimeMs) return;
    if (!inspection.complete) {
      log.warn({ file: file.path, ends: inspection.incomplete }, 'inbox file does not end with a whole record; waiting for the rest');
      stamp.incomplete = true;
      return;
    }
    await take(file, kind, { size: file.size, mtimeMs: file.mtimeMs, sha256: inspection.sha256 });
  }

  async function take(file: FolderFile, folderKind: ImportKind | undefined, as: TakenAs): Promise<void> {
    let kind = folderKind;
    if (kind === undefined) {
      try {
        kind = detectKind({ headers: await readHeaders(file.path), file: file.name });
      } catch (error) {
        if (!isRejection(error)) throw error;
        await reject(file.path, rejectionText(file.name, reasonsOf(error), undefined), undefined);
        return;
      }
    }
    const target = await freePath(kindFolder(folders.processing, kind), file.name, Date.now());
    // Recorded first: the next pass may find it in processing/ before this one ends.
    takenAs.set(target, as);
    try {
      await moveFile(file.path, target);
    } catch (error) {
      takenAs.delete(target);
      // Another watcher (or the operator) took it first.
      if (isCode(error, 'ENOENT')) return;
      throw error;
    }
    log.info({ file: file.name, kind, processing: target }, 'inbox file taken');
  }

  /** Step 2: import what lies in processing/, and move on what has settled. */
  async function advanceProcessing(): Promise<void> {
    const present = new Set<string>();
    for (const kind of IMPORT_KINDS) {
      for (const file of await listFiles(kindFolder(folders.processing, kind))) {
        present.add(file.path);
        await guarded(file.path, () => advance(file, kind));
      }
    }
    // Forget files that went away (moved on, or removed by hand).
    for (const [file, entry] of tracked) if (!present.has(file) && entry.state !== 'enqueuing') tracked.delete(file);
    for (const file of takenAs.keys()) if (!present.has(file) && !tracked.has(file)) takenAs.delete(file);
  }

  async function advance(file: FolderFile, kind: ImportKind): Promise<void> {
    const entry = tracked.get(file.path);
    if (entry === undefined || (entry.state === 'retry' && Date.now() >= entry.at)) {
      startImport(file);
    } else if (entry.state === 'rejected') {
      await reject(file.path, entry.reason, kind);
      tracked.delete(file.path);
    } else if (entry.state === 'waiting') {
      const status = await importStatus(store, entry.importId);
      if (status === undefined) {
        // Redis lost the import (flushed, or restarted without persistence): import the
        // file again; the journal makes its creates read back first.
        log.warn({ file: file.path, importId: entry.importId }, 'import record missing from Redis; importing the file again');
        startImport(file);
      } else if (status.finished) {
        const change = await changeOf(file.path);
        if (change !== undefined) {
          // The import read the file as taken; the file here is not that file any more.
          await reject(file.path, changedText(file.name, change, `Its import ${entry.importId} read it as it was when taken and has settled: results/${entry.importId}/. The changes were not imported; import only the rows that are not in that import's results.`), kind);
        } else {
          await settle(file, kind, entry.importId, status);
        }
        tracked.delete(file.path);
      }
    }
  }

  function startImport(file: FolderFile): void {
    tracked.set(file.path, { state: 'enqueuing' });
    const run = enqueueLimit(() => enqueue(file))
      .catch((error: unknown): Tracked => {
        log.error({ err: error, file: file.path, retryInMs: retryMs }, 'inbox file could not be imported; trying again later');
        return { state: 'retry', at: Date.now() + retryMs };
      })
      .then((next) => {
        tracked.set(file.path, next);
        enqueues.delete(run);
      });
    enqueues.add(run);
  }

  /**
   * What a file in processing/ differs in from what was taken: undefined when
   * it is the same. A file found there without a record (after a restart) is
   * recorded as it is now.
   */
  async function changeOf(file: string): Promise<string | undefined> {
    const was = takenAs.get(file);
    const info = await stat(file);
    if (was === undefined) {
      takenAs.set(file, { size: info.size, mtimeMs: info.mtimeMs, sha256: (await inspectFile(file)).sha256 });
      return undefined;
    }
    if (info.size !== was.size) return `its size went from ${was.size} to ${info.size} bytes`;
    if (info.mtimeMs !== was.mtimeMs) return 'its modification time changed';
    if ((await inspectFile(file)).sha256 !== was.sha256) return 'its content changed (same size and time)';
    return undefined;
  }

  /** Imports one file of processing/; what comes of it is left for the next pass to act on. */
  async function enqueue(file: FolderFile): Promise<Tracked> {
    let importId: string | undefined;
    const before = await changeOf(file.path);
    if (before !== undefined) return rejectedAsChanged(file, before, undefined);
    const was = takenAs.get(file.path);
    try {
      const result = await importFile(
        { file: file.path, inboxFolder: path.dirname(file.path), priority: options.priority },
        // The journal makes a file imported again after Redis lost its import read back before creating.
        {
          store,
          queues,
          keyring,
          journal,
          logger: options.runtime.logger,
          onImportId: (id) => {
            // The producer has hashed the file and queued nothing yet: a change now stops it before any row.
            const info = statSync(file.path);
            if (was !== undefined && (info.size !== was.size || info.mtimeMs !== was.mtimeMs)) {
              throw new FileChangedError(`its size or modification time changed while its import id was computed (${was.size} → ${info.size} bytes)`);
            }
            importId = id;
          },
        },
      );
      const after = await changeOf(file.path);
      if (after !== undefined && (result.outcome === 'enqueued' || result.outcome === 'already-imported')) {
        return rejectedAsChanged(file, after, result.importId);
      }
      if (result.outcome === 'enqueued' || result.outcome === 'already-imported') {
        const message = result.outcome === 'enqueued' ? 'inbox file enqueued' : 'inbox file already imported (same bytes); waiting for its results';
        log.info({ file: file.path, importId: result.importId, kind: result.kind }, message);
        return { state: 'waiting', importId: result.importId };
      }
      // Neither a dry run nor all-or-nothing is asked for here; kept total.
      return { state: 'rejected', reason: rejectionText(file.name, [`the import ended as ${result.outcome}`], undefined) };
    } catch (error) {
      if (error instanceof FileChangedError) return rejectedAsChanged(file, error.message, undefined);
      if (!isRejection(error)) throw error;
      // A fault mid-file may come after some rows were queued; say so.
      const partial = importId !== undefined && (await store.getImport(importId)) !== undefined ? importId : undefined;
      return { state: 'rejected', reason: rejectionText(file.name, reasonsOf(error), partial) };
    }
  }

  function rejectedAsChanged(file: FolderFile, change: string, importId: string | undefined): Tracked {
    log.error({ file: file.path, change, importId }, 'inbox file changed while being imported; refused');
    const queued =
      importId === undefined
        ? 'Nothing of it was imported.'
        : `Its import ${importId} had already read it and queued its rows, which may hold the changed bytes: check them with \`subsync status ${importId}\` and, once it settles, the results in results/${importId}/.`;
    return { state: 'rejected', reason: changedText(file.name, change, queued) };
  }

  async function settle(file: FolderFile, kind: ImportKind, importId: string, status: ImportStatus): Promise<void> {
    const { resultsDir, counts } = status;
    if (cardRetentionMs === 0 && (CARD_KINDS.has(kind) || (await holdsCardData(file.path)))) {
      await rm(file.path, { force: true });
      log.info({ file: file.name, importId, resultsDir, counts }, 'inbox file settled; deleted at once (card data)');
      return;
    }
    const target = await freePath(folders.done, file.name, Date.now());
    await moveFile(file.path, target);
    // done/'s mtime is when the file got there: the card retention counts from it.
    const now = new Date();
    await utimes(target, now, now);
    log.info({ file: file.name, importId, resultsDir, counts, done: target }, 'inbox file settled');
  }

  /**
   * A rejected file: its error file into failed/, and the file beside it,
   * owner-only, unless it holds card data: then it is deleted, since a copy
   * masked well enough to keep could not be imported again anyway, and a
   * rejected file may not parse well enough to find its card cells.
   */
  async function reject(file: string, reason: string, kind: ImportKind | undefined): Promise<void> {
    const target = await freePath(folders.failed, path.basename(file), Date.now());
    const cardData = (kind !== undefined && CARD_KINDS.has(kind)) || (await holdsCardData(file)) || (await containsCardNumber(file));
    const text = scrubCardNumbers(cardData ? `${reason}${CARD_FILE_DELETED}` : reason);
    // The reason first: a file in failed/ always has its explanation beside it.
    await writeTextFile(`${target}${ERROR_SUFFIX}`, text, PRIVATE_MODE);
    if (cardData) {
      await rm(file, { force: true });
      log.warn({ file: path.basename(file), failed: `${target}${ERROR_SUFFIX}`, reason: text }, 'inbox file rejected; deleted, as it holds card data');
      return;
    }
    await moveFile(file, target);
    await chmod(target, PRIVATE_MODE);
    // failed/'s retention counts from when the file got there.
    const now = new Date();
    await utimes(target, now, now);
    log.warn({ file: path.basename(file), failed: target, reason: text }, 'inbox file rejected');
  }

  /**
   * Step 4: failed/ keeps nothing beyond its retention, no card data in clear
   * (left there by an older subsync, or put there by hand) and nothing others
   * can read.
   */
  async function sweepFailed(): Promise<void> {
    const files = await listFiles(folders.failed);
    const names = new Set(files.map((file) => file.name));
    for (const name of failedChecked.keys()) if (!names.has(name)) failedChecked.delete(name);
    const now = Date.now();
    for (const file of files) {
      await guarded(file.path, async () => {
        if (now - file.mtimeMs >= failedRetentionMs) {
          await rm(file.path, { force: true });
          failedChecked.delete(file.name);
          log.info({ file: file.name }, 'failed/ file deleted (retention over)');
          return;
        }
        if (failedChecked.get(file.name) === file.mtimeMs) return;
        if (file.name.endsWith(ERROR_SUFFIX)) {
          const text = await readFile(file.path, 'utf8');
          const scrubbed = scrubCardNumbers(text);
          // Rewritten with its mtime kept: the retention still counts from its arrival.
          if (scrubbed !== text) {
            await writeTextFile(file.path, scrubbed, PRIVATE_MODE);
            await utimes(file.path, new Date(file.mtimeMs), new Date(file.mtimeMs));
            log.warn({ file: file.name }, 'failed/ error file held card-number-shaped digits; masked');
          }
        } else if ((await holdsCardData(file.path)) || (await containsCardNumber(file.path))) {
          await rm(file.path, { force: true });
          failedChecked.delete(file.name);
          log.warn({ file: file.name }, 'failed/ file held card data in clear; deleted');
          return;
        }
        await chmod(file.path, PRIVATE_MODE);
        failedChecked.set(file.name, file.mtimeMs);
      });
    }
  }

  /** Step 3: delete files holding card data from done/ once their retention has passed. */
  async function sweepCardFiles(): Promise<void> {
    const files = await listFiles(folders.done);
    const names = new Set(files.map((file) => file.name));
    for (const name of doneFiles.keys()) if (!names.has(name)) doneFiles.delete(name);
    const now = Date.now();
    for (const file of files) {
      await guarded(file.path, async () => {
        if (!doneFiles.has(file.name)) doneFiles.set(file.name, (await holdsCardData(file.path)) ? file.mtimeMs + cardRetentionMs : undefined);
        const due = doneFiles.get(file.name);
        if (due === undefined || now < due) return;
        await rm(file.path, { force: true });
        doneFiles.delete(file.name);
        log.info({ file: file.name }, 'processed card file deleted (retention over)');
      });
    }
  }

  /** Runs `step` for one file; an error is logged, and the other files go on. */
  async function guarded(file: string, step: () => Promise<void>): Promise<void> {
    try {
      await step();
    } catch (error) {
      if (isCode(error, 'ENOENT')) return;
      log.error({ err: error, file }, 'inbox file step failed; tried again at the next poll');
    }
  }

  /** Since when the inbox is paused (`subsync inbox pause`), as last told; undefined when running. */
  let pausedSince: number | undefined;
  /** Whether to take new files this pass: not while the inbox is paused, said once when that starts and ends. */
  async function taking(): Promise<boolean> {
    const since = await inboxPausedSince(store.redis, store.keys);
    if (since !== pausedSince) {
      if (since !== undefined) log.warn({ inbox: folders.inbox, pausedAt: new Date(since).toISOString() }, 'inbox paused: new files stay in the inbox until `subsync inbox resume`; imports already taken run on');
      else log.info({ inbox: folders.inbox }, 'inbox resumed: taking files again');
      pausedSince = since;
    }
    return since === undefined;
  }

  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let passes: Promise<void> = Promise.resolve();
  const scan = (): Promise<void> => {
    passes = passes.then(async () => {
      try {
        if (await taking()) await takeCompleteFiles();
        await advanceProcessing();
        await sweepCardFiles();
        await sweepFailed();
      } catch (error) {
        log.error({ err: error }, 'inbox pass failed; trying again at the next poll');
      }
    });
    return passes;
  };
  const schedule = (): void => {
    if (closed) return;
    timer = setTimeout(() => void scan().then(schedule), pollMs);
  };

  await scan();
  schedule();
  log.info({ inbox: folders.inbox, pollMs, settleMs, cardRetentionMs, failedRetentionMs }, 'watching the inbox');
  return {
    folders,
    scan,
    async close() {
      closed = true;
      clearTimeout(timer);
      await passes;
      // Let an enqueue under way finish: the runtime's connections close after this.
      while (enqueues.size > 0) await Promise.all([...enqueues]);
    },
  };
}

/** A file refused as a whole: it goes to failed/, not back for another try. */
function isRejection(error: unknown): error is FileRejectedError | CsvFormatError | ColumnMapError {
  return error instanceof FileRejectedError || error instanceof CsvFormatError || error instanceof ColumnMapError;
}

/** Why a file was rejected, one sentence each. */
function reasonsOf(error: FileRejectedError | CsvFormatError | ColumnMapError): string[] {
  return error instanceof CsvFormatError ? [error.message] : error.problems;
}

/** Added to the error file of a rejected file that held card data. */
const CARD_FILE_DELETED = 'The file held card data or passwords, so it was deleted rather than kept here: they are never kept in clear. Fix your own copy and drop it again.\n';

/** The text of `<name>.error.txt`. */
function rejectionText(name: string, reasons: readonly string[], partialImportId: string | undefined): string {
  const queued = partialImportId === undefined
    ? 'Nothing of it was imported.'
    : `Rows before the fault may have been queued already, as import ${partialImportId} (\`subsync status ${partialImportId}\`).`;
  return [`${name} was rejected at ${new Date().toISOString()}.`, ...reasons.map((reason) => `- ${reason}`), queued, 'Fix the file and drop it into the inbox again.', ''].join('\n');
}

/** The text of `<name>.error.txt` for a file that changed after it was taken. */
function changedText(name: string, change: string, what: string): string {
  return [
    `${name} changed while being imported (${change}), noticed at ${new Date().toISOString()}.`,
    'It was taken from the inbox after its size and modification time had held for the settle time and it ended with a whole record, and something wrote to it after that.',
    what,
    'Write files under a temporary name (x.csv.part) and rename them when complete; then drop the whole file again.',
    '',
  ].join('\n');
}

/**
 * Whether a processed file holds card numbers (its headers say signups or
 * cards) or passwords (a customers file with a value in its Password
 * column): kept like card data, never longer than the card retention.
 */
async function holdsCardData(file: string): Promise<boolean> {
  try {
    const headers = await readHeaders(file);
    const kind = detectKind({ headers, file });
    if (CARD_KINDS.has(kind)) return true;
    const password = kind === 'customers' ? headers.findIndex((header) => resolvePath(kind, cleanHeader(header)) === 'Password') : -1;
    if (password < 0) return false;
    try {
      const csv = await openCsv(file);
      try {
        for await (const row of csv.rows) if ((row.cells[password] ?? '') !== '') return true;
      } finally {
        csv.close();
      }
    } catch (error) {
      // A file that does not parse to its end may hold a password past where it broke.
      if (isRejection(error)) return true;
      throw error;
    }
    return false;
  } catch (error) {
    if (isRejection(error)) return false;
    throw error;
  }
}

