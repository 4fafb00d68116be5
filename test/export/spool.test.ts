import { mkdir, mkdtemp, readdir, rm, stat, utimes } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CUSTOMER_FIELDS, CustomerSchema } from '../../src/api/schemas/index.js';
import { openSpool, pruneSpools, spoolDirOf } from '../../src/export/spool.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-spool-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DAY = 24 * 3600 * 1000;

describe('spool', () => {
  it('keeps a page as the service gave it, owner-only, and says which pages it has', async () => {
    const spool = openSpool(spoolDirOf(dir, 'e1'));
    const blank = Object.fromEntries(CUSTOMER_FIELDS.map((f) => [f, '']));
    const page = [
      CustomerSchema.parse({ ...blank, CustomerID: '7', FirstName: 'Zoë\n"Z"', MobileNumber: null }),
      CustomerSchema.parse({ ...blank, CustomerID: '8', LastName: 'O\'Brien, Jr.', MobileNumber: '+353' }),
    ];
    expect(await spool.has(0, 3)).toBe(false);
    await spool.write(0, 3, page);
    expect(await spool.has(0, 3)).toBe(true);
    expect(await spool.read(0, 3)).toEqual(page);
    expect((await stat(path.join(spool.dir, '0-3.jsonl'))).mode & 0o777).toBe(0o600);
    expect(await readdir(spool.dir)).toEqual(['0-3.jsonl']);
    await spool.remove();
    expect(await spool.has(0, 3)).toBe(false);
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
