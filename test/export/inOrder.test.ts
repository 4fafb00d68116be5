import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createInOrderWriter } from '../../src/export/inOrder.js';
import { describeIds, type PageRead } from '../../src/export/pager.js';
import { openSpool, type Spool } from '../../src/export/spool.js';
import { openExportFile } from '../../src/export/writer.js';

let dir: string;
let spool: Spool;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-inorder-'));
  spool = openSpool(path.join(dir, 'spool'));
});
afterEach(async () => {
  await spool.remove();
  await rm(dir, { recursive: true, force: true });
});

const SIZE = 2;

/** Page `page` of a listing of `total` customers whose IDs are 1..total (or `ids`), spooled and ready to offer. */
async function read(page: number, total: number, ids?: number[], round = 1): Promise<PageRead> {
  const own = ids ?? [page * SIZE + 1, page * SIZE + 2].filter((id) => id <= total);
  const rows = { ids: own.map(String), rows: own.map((id) => `${id}\n`) };
  const { loc, body } = await spool.append(0, page, rows);
  return { listing: 0, contains: '', page, round, meta: { n: own.length, t: total, r: round, ...describeIds(rows.ids), ...loc }, body };
}

describe('createInOrderWriter', () => {
  it('writes pages in page order however they arrive, short of the last page, and says which reads it wrote', async () => {
    const sink = await openExportFile({ dir, name: 'a.jsonl', format: 'jsonl', gzip: false });
    const writer = createInOrderWriter({ sink, spool, pageSize: SIZE });
    const reads = await Promise.all([0, 1, 2, 3, 4].map((page) => read(page, 10)));
    for (const page of [2, 4, 1, 3, 0]) writer.offer(reads[page]!);
    const head = await writer.settle();
    expect(head?.pages).toEqual([0, 1, 2, 3].map((page) => reads[page]!.meta).map(({ f, o, b }) => ({ f, o, b })));
    const file = await sink.finish();
    expect(await readFile(file.path, 'utf8')).toBe('1\n2\n3\n4\n5\n6\n7\n8\n');
    expect(file.count).toBe(8);
  });

  it('gives up when CustomerIDs stop ascending (the file is then written again from the spool), and ignores later rounds', async () => {
    const sink = await openExportFile({ dir, name: 'b.jsonl', format: 'jsonl', gzip: false });
    const writer = createInOrderWriter({ sink, spool, pageSize: SIZE });
    writer.offer(await read(1, 10, [3, 4], 2));
    writer.offer(await read(0, 10, [1, 2]));
    writer.offer(await read(1, 10, [2, 3]));
    expect(await writer.settle()).toBeUndefined();
    await sink.abort();
  });

  it('stops at a page that never came: a resumed run leaves the rest to the end', async () => {
    const sink = await openExportFile({ dir, name: 'c.jsonl', format: 'jsonl', gzip: false });
    const writer = createInOrderWriter({ sink, spool, pageSize: SIZE });
    for (const page of [0, 2, 3]) writer.offer(await read(page, 10));
    expect((await writer.settle())?.pages).toHaveLength(1);
    expect(sink.count).toBe(2);
    await sink.abort();
  });
});
