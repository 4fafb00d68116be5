import { mkdir, mkdtemp, readdir, rm, stat, truncate, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSpool, pruneSpools, spoolDirOf, SpoolCorruptError } from '../../src/export/spool.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-spool-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DAY = 24 * 3600 * 1000;

describe('spool', () => {
  it('keeps each page\'s rows and CustomerIDs in one owner-only segment per run, and says which pages it has', async () => {
    const spool = openSpool(spoolDirOf(dir, 'e1'));
    // Rows with a line break inside a quoted cell and characters of several UTF-8 lengths.
    const three = { ids: ['7', '8'], rows: ['"7","Zoë\n""Z"""\n', '"8","Łucja 🎉"\n'] };
    const four = { ids: ['9'], rows: ['"9","O\'Brien, Jr."\n'] };
    const empty = { ids: [], rows: [] };
    const a = await spool.append(0, 3, three);
    const b = await spool.append(0, 4, four);
    const c = await spool.append(2, 0, empty);
    expect(a.body.toString('utf8')).toBe(three.rows.join(''));
    expect(b.loc.o).toBe(a.loc.o + a.loc.b);
    await spool.sync();
    for (const { loc } of [a, b, c]) expect(await spool.has(loc)).toBe(true);
    expect(await spool.read(0, 3, a.loc)).toEqual(three);
    expect(await spool.read(0, 4, b.loc)).toEqual(four);
    expect(await spool.read(2, 0, c.loc)).toEqual(empty);
    expect((await spool.readBody(0, 4, b.loc)).toString('utf8')).toBe(four.rows.join(''));
    // A record asked for as another page is refused, not returned.
    await expect(spool.read(0, 5, b.loc)).rejects.toBeInstanceOf(SpoolCorruptError);

    const segments = await readdir(spool.dir);
    expect(segments).toEqual([a.loc.f]);
    expect((await stat(path.join(spool.dir, a.loc.f))).mode & 0o777).toBe(0o600);
    await spool.close();

    // A second run appends to a segment of its own, and still reads the first run's pages.
    const again = openSpool(spoolDirOf(dir, 'e1'));
    const d = await again.append(0, 5, four);
    await again.sync();
    expect(d.loc.f).not.toBe(a.loc.f);
    expect(await again.read(0, 3, a.loc)).toEqual(three);
    // A record cut short (the bytes never reached the disk) is not there.
    await truncate(path.join(spool.dir, a.loc.f), b.loc.o + 1);
    expect(await again.has(b.loc)).toBe(false);
    expect(await again.has(a.loc)).toBe(true);
    await again.remove();
    expect(await again.has(a.loc)).toBe(false);
  });

  it('prunes spools untouched past the retention, never the running export\'s', async () => {
    for (const id of ['old', 'fresh', 'mine']) await mkdir(spoolDirOf(dir, id), { recursive: true });
    const long = new Date(Date.now() - 10 * DAY);
    await utimes(spoolDirOf(dir, 'old'), long, long);
    await utimes(spoolDirOf(dir, 'mine'), long, long);
    expect(await pruneSpools(dir, 7 * DAY, 'mine')).toEqual(['old']);
    expect((await readdir(path.join(dir, '.spool'))).sort()).toEqual(['fresh', 'mine']);
  });
});
