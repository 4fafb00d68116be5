import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';

/**
 * Files that appear whole or not at all: written under a hidden temporary
 * name beside the target, flushed, renamed into place, and the directory
 * synced, so a reader (or a crash) never sees half a file.
 */

/** A hidden name beside `target`, unique to this write. */
export function tempPathFor(target: string): string {
  return path.join(path.dirname(target), `.${path.basename(target)}.${randomBytes(6).toString('hex')}.tmp`);
}

/** Makes the renames durable across a power cut, where the platform allows fsync on a directory. */
export async function syncDirectory(dir: string): Promise<void> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(dir, 'r');
    await handle.sync();
  } catch {
    // Not every platform can fsync a directory (Windows cannot): the files are
    // complete and renamed either way; only the rename's durability is weaker.
  } finally {
    await handle?.close();
  }
}

/**
 * Writes `data` to `file` whole: the mode is set at creation (the text is
 * never readable by others, not even for a moment), the bytes are flushed
 * before the rename, and the temporary file never outlives a failure.
 */
export async function writeFileAtomic(file: string, data: string, mode = 0o644): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const temp = tempPathFor(file);
  try {
    await writeFile(temp, data, { encoding: 'utf8', flag: 'wx', mode, flush: true });
    await rename(temp, file);
  } finally {
    await rm(temp, { force: true });
  }
  await syncDirectory(path.dirname(file));
}
