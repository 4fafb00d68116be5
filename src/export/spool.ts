/**
 * The finished pages of an export on disk, so that memory stays flat however
 * many customers there are, and a resumed run finds the pages the killed run
 * had finished: `<data dir>/exports/.spool/<exportId>/<run>.seg`, one
 * append-only segment per run. A page is appended as it is read, already
 * formatted as the export file's rows (CSV or JSONL), after a header line
 * with its CustomerIDs and the byte length of each row (enough to drop a
 * repeated CustomerID without parsing anything again).
 *
 * Where a page sits (segment, offset, bytes) is recorded in Redis with the
 * page (state.ts), and only after `sync` has made its bytes durable: the
 * pager appends a batch, syncs once, then records the batch in one
 * transaction (group commit), so a recorded page always has its whole record
 * on disk, on this machine (see `has`). One fdatasync per batch instead of a
 * file, an fsync and a rename per page.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rm, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { SubsyncError } from '../errors.js';

/** A page as the export file holds it: its rows (each ending in LF) in the service's order, with their CustomerIDs. */
export interface PageRows {
  ids: readonly string[];
  /** Each row's text, its line end included. */
  rows: readonly string[];
}

/** Where a page's record sits: segment file name, byte offset, byte length (header included). */
export interface SpoolLocation {
  f: string;
  o: number;
  b: number;
}

/** A page appended to the spool: where it is, and its rows as one buffer (what the export file gets). */
export interface AppendedPage {
  loc: SpoolLocation;
  body: Buffer;
}

export interface Spool {
  readonly dir: string;
  /** Appends a page to this run's segment; durable only once a later `sync` has resolved. */
  append(listing: number, page: number, rows: PageRows): Promise<AppendedPage>;
  /** Makes every page appended so far durable (waits for their writes, then one fdatasync). */
  sync(): Promise<void>;
  /** False when the page's record is not here: the run that read it ran on another machine, or the folder was cleared. */
  has(loc: SpoolLocation): Promise<boolean>;
  /** The page's rows; throws when the record is not the page asked for. */
  read(listing: number, page: number, loc: SpoolLocation): Promise<PageRows>;
  /** The page's rows as one buffer, as they go into the export file. */
  readBody(listing: number, page: number, loc: SpoolLocation): Promise<Buffer>;
  /** Closes this run's segment (the pages stay). */
  close(): Promise<void>;
  /** Closes and removes the whole spool of the export. */
  remove(): Promise<void>;
}

export const spoolDirOf = (exportsDir: string, exportId: string): string => path.join(exportsDir, '.spool', exportId);

/**
 * Removes the spools of exports untouched for `maxAgeMs` (failed for good and
 * never retried: BullMQ drops failed jobs after the same retention), but
 * never `keep`'s. Returns the export ids removed.
 */
export async function pruneSpools(exportsDir: string, maxAgeMs: number, keep: string, now = Date.now()): Promise<string[]> {
  const root = path.join(exportsDir, '.spool');
  const removed: string[] = [];
  for (const id of await readdir(root).catch(() => [] as string[])) {
    if (id === keep) continue;
    const info = await stat(path.join(root, id)).catch(() => undefined);
    if (!info?.isDirectory() || now - info.mtimeMs < maxAgeMs) continue;
    await rm(path.join(root, id), { recursive: true, force: true });
    removed.push(id);
  }
  return removed;
}

/** Owner only: the pages hold customers' personal data and are nobody else's business. */
const SPOOL_MODE = 0o600;

/** The header line of a page's record. */
interface PageHeader {
  l: number;
  p: number;
  ids: readonly string[];
  /** Byte length of each row. */
  lens: number[];
}

const LF = 0x0a;

export class SpoolCorruptError extends SubsyncError {
  readonly code = 'EXPORT_SPOOL_CORRUPT';
  constructor(listing: number, page: number, loc: SpoolLocation, why: string) {
    super(`spooled page ${listing}:${page} (${loc.f} at ${loc.o}) is unreadable: ${why}`);
  }
}

export function openSpool(dir: string): Spool {
  // One segment per run: two runs never append to the same file.
  const segment = `${Date.now().toString(36)}-${randomBytes(4).toString('hex')}.seg`;
  let handle: Promise<FileHandle> | undefined;
  let size = 0;
  let writes: Array<Promise<unknown>> = [];
  let closed = false;

  const segmentHandle = (): Promise<FileHandle> =>
    (handle ??= (async () => {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      return open(path.join(dir, segment), 'wx', SPOOL_MODE);
    })());

  async function readRecord(listing: number, page: number, loc: SpoolLocation): Promise<{ header: PageHeader; body: Buffer }> {
    const file = await open(path.join(dir, path.basename(loc.f)), 'r');
    let bytes: Buffer;
    try {
      bytes = Buffer.allocUnsafe(loc.b);
      const { bytesRead } = await file.read(bytes, 0, loc.b, loc.o);
      if (bytesRead !== loc.b) throw new SpoolCorruptError(listing, page, loc, `${bytesRead} of ${loc.b} bytes`);
    } finally {
      await file.close();
    }
    const end = bytes.indexOf(LF);
    let header: PageHeader;
    try {
      header = JSON.parse(bytes.toString('utf8', 0, end)) as PageHeader;
    } catch {
      throw new SpoolCorruptError(listing, page, loc, 'bad header');
    }
    const body = bytes.subarray(end + 1);
    const total = Array.isArray(header.lens) ? header.lens.reduce((a, b) => a + b, 0) : -1;
    if (header.l !== listing || header.p !== page || !Array.isArray(header.ids) || header.ids.length !== header.lens.length || total !== body.length) {
      throw new SpoolCorruptError(listing, page, loc, 'header does not match');
    }
    return { header, body };
  }

  async function close(): Promise<void> {
    if (closed) return;
    closed = true;
    const current = handle;
    if (!current) return;
    await Promise.allSettled(writes);
    await (await current.catch(() => undefined))?.close();
  }

  return {
    dir,
    async append(listing, page, { ids, rows }) {
      if (closed) throw new Error(`spool ${dir} is closed`);
      const body = Buffer.from(rows.join(''), 'utf8');
      const lens = rows.map((row) => Buffer.byteLength(row, 'utf8'));
      const header = Buffer.from(`${JSON.stringify({ l: listing, p: page, ids, lens } satisfies PageHeader)}\n`, 'utf8');
      // The offset is taken before anything awaits, so appends never overlap.
      const loc: SpoolLocation = { f: segment, o: size, b: header.length + body.length };
      size += loc.b;
      const written = segmentHandle().then((fh) => fh.writev([header, body], loc.o));
      writes.push(written);
      await written;
      return { loc, body };
    },
    async sync() {
      if (!handle) return;
      const pending = writes;
      writes = [];
      await Promise.all(pending);
      await (await handle).datasync();
    },
    async has(loc) {
      const info = await stat(path.join(dir, path.basename(loc.f))).catch(() => undefined);
      return info !== undefined && info.size >= loc.o + loc.b;
    },
    async read(listing, page, loc) {
      const { header, body } = await readRecord(listing, page, loc);
      const rows: string[] = [];
      let at = 0;
      for (const len of header.lens) {
        rows.push(body.toString('utf8', at, at + len));
        at += len;
      }
      return { ids: header.ids, rows };
    },
    async readBody(listing, page, loc) {
      return (await readRecord(listing, page, loc)).body;
    },
    close,
    async remove() {
      await close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
