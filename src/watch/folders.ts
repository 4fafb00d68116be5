/**
 * The folders a file travels through, and the moves
 * between them. The folders are the watcher's state: where a file lies says
 * how far it got, so a restart picks up from there.
 *
 * - `inbox/` (and `inbox/<kind>/`): dropped by operators, not yet taken;
 * - `processing/<kind>/`: taken, its import enqueued or under way;
 * - `done/`: its import settled and the results are written;
 * - `failed/`: the whole file was rejected; `<name>.error.txt` says why, and
 *   the file itself is beside it unless it held card data (then deleted).
 *   Everything there is owner-only (0600) and deleted after the retention.
 */
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { IMPORT_KINDS, type ImportKind } from '../outcomes.js';
import { tempPathFor, writeFileAtomic } from '../files.js';

export interface WatchFolders {
  inbox: string;
  processing: string;
  done: string;
  failed: string;
}

/** The folders under `dataDir`; `inbox` defaults to `<dataDir>/inbox`. */
export function watchFolders(dataDir: string, inbox?: string): WatchFolders {
  return {
    inbox: path.resolve(inbox ?? path.join(dataDir, 'inbox')),
    processing: path.join(dataDir, 'processing'),
    done: path.join(dataDir, 'done'),
    failed: path.join(dataDir, 'failed'),
  };
}

/** `<root>/<kind>`: the inbox and processing sub-folder of a kind. */
export const kindFolder = (root: string, kind: ImportKind): string => path.join(root, kind);

/** Creates every folder, the kind sub-folders of the inbox and of processing/ included. */
export async function createFolders(folders: WatchFolders): Promise<void> {
  for (const root of [folders.inbox, folders.processing]) {
    for (const kind of IMPORT_KINDS) await mkdir(kindFolder(root, kind), { recursive: true });
  }
  await mkdir(folders.done, { recursive: true });
  await mkdir(folders.failed, { recursive: true });
}

/**
 * Names that are never taken: dot-files (editors' and sync tools' temporaries,
 * subsync's own) and `*.part`, the convention for a file still being written
 * (write `x.csv.part`, then rename it to `x.csv`).
 */
export const isIgnoredName = (name: string): boolean => name.startsWith('.') || name.toLowerCase().endsWith('.part');

/** A regular file of a folder, with what tells whether it is still growing. */
export interface FolderFile {
  name: string;
  path: string;
  size: number;
  mtimeMs: number;
}

/** The regular files of `dir` that are not ignored, by name; none when the folder is missing. */
export async function listFiles(dir: string): Promise<FolderFile[]> {
  let names: string[];
  try {
    names = (await readdir(dir, { withFileTypes: true })).filter((entry) => entry.isFile() && !isIgnoredName(entry.name)).map((entry) => entry.name);
  } catch (error) {
    if (isCode(error, 'ENOENT')) return [];
    throw error;
  }
  const files: FolderFile[] = [];
  for (const name of names.sort()) {
    const file = path.join(dir, name);
    try {
      const info = await stat(file);
      files.push({ name, path: file, size: info.size, mtimeMs: info.mtimeMs });
    } catch (error) {
      // Taken or removed since the listing: not ours to report.
      if (!isCode(error, 'ENOENT')) throw error;
    }
  }
  return files;
}

/**
 * A path in `dir` for `name` that no file has: the name itself, else the name
 * with a UTC timestamp before its extension (`customers-20250301T101500123Z.csv`),
 * so a file never overwrites an earlier one of the same name.
 */
export async function freePath(dir: string, name: string, now: number): Promise<string> {
  const ext = path.extname(name);
  const stem = name.slice(0, name.length - ext.length);
  const stamp = new Date(now).toISOString().replace(/[-:.]/g, '');
  const candidates = [name, `${stem}-${stamp}${ext}`];
  for (let n = 2; candidates.length < 12; n++) candidates.push(`${stem}-${stamp}-${n}${ext}`);
  for (const candidate of candidates) {
    const target = path.join(dir, candidate);
    if (!(await exists(target))) return target;
  }
  return path.join(dir, `${stem}-${stamp}-${randomBytes(4).toString('hex')}${ext}`);
}

/**
 * Moves a file by rename: atomic, so no reader ever sees half of it and two
 * watchers cannot both take it (the loser's rename fails with ENOENT). An
 * inbox on another file system (EXDEV) is copied to a hidden name beside the
 * target, renamed into place, then removed from the inbox; a crash in between
 * leaves the same bytes in both places, which import under the same id, so
 * nothing is imported twice.
 */
export async function moveFile(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (error) {
    if (!isCode(error, 'EXDEV')) throw error;
    const temp = tempPathFor(to);
    try {
      await copyFile(from, temp);
      await rename(temp, to);
    } finally {
      await rm(temp, { force: true });
    }
    await rm(from);
  }
}

/** Writes a small text file under a hidden temporary name, then renames it into place. */
export async function writeTextFile(file: string, text: string, mode = 0o644): Promise<void> {
  await writeFileAtomic(file, text, mode);
}


async function exists(file: string): Promise<boolean> {
  try {
    await stat(file);
    return true;
  } catch (error) {
    if (isCode(error, 'ENOENT')) return false;
    throw error;
  }
}

/** A Node file-system error with this `code`. */
export function isCode(error: unknown, code: string): boolean {
  return error instanceof Error && 'code' in error && error.code === code;
}
