/**
 * The finished pages of an export on disk, one file per page read
 * (`<data dir>/exports/.spool/<exportId>/<listing>-<page>.jsonl`, the
 * records as the service returned them), so that memory stays flat however
 * many customers there are, and a resumed run finds the pages the killed run
 * had finished. Each file is written to a temp name and renamed before its
 * page is recorded as finished in Redis, so a recorded page always has its
 * whole file (on this machine: see `has`).
 */
import { randomBytes } from 'node:crypto';
import { access, mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CustomerSchema, type Customer } from '../api/schemas/index.js';

export interface Spool {
  readonly dir: string;
  write(listing: number, page: number, customers: readonly Customer[]): Promise<void>;
  /** False when the page's file is not here: the run that read it ran on another machine, or the folder was cleared. */
  has(listing: number, page: number): Promise<boolean>;
  read(listing: number, page: number): Promise<Customer[]>;
  /** Removes the whole spool of the export. */
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

export function openSpool(dir: string): Spool {
  const fileOf = (listing: number, page: number): string => path.join(dir, `${listing}-${page}.jsonl`);
  return {
    dir,
    async write(listing, page, customers) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      const file = fileOf(listing, page);
      const temp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
      const text = customers.map((c) => `${JSON.stringify(c)}\n`).join('');
      await writeFile(temp, text, { encoding: 'utf8', mode: SPOOL_MODE, flush: true });
      await rename(temp, file);
    },
    async has(listing, page) {
      try {
        await access(fileOf(listing, page));
        return true;
      } catch {
        return false;
      }
    },
    async read(listing, page) {
      const text = await readFile(fileOf(listing, page), 'utf8');
      return text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => CustomerSchema.parse(JSON.parse(line)));
    },
    async remove() {
      await rm(dir, { recursive: true, force: true });
    },
  };
}
