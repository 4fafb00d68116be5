import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/** A temp folder for one test file's CSVs, removed by `remove()` (call it in afterAll). */
export async function tempFolder(): Promise<{ file(name: string, content: string | Buffer): Promise<string>; path(name: string): string; remove(): Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-csv-'));
  return {
    async file(name, content) {
      const file = path.join(dir, name);
      await writeFile(file, content);
      return file;
    },
    path: (name) => path.join(dir, name),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

/** Every row of an iterable, collected. */
export async function collect<T>(rows: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const row of rows) out.push(row);
  return out;
}
