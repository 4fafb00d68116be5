/**
 * How the ledger's scripts (src/store/importStore.ts) read and write in one
 * call, on real Redis: entries read without cjson, whatever their cells
 * hold and in either key order; a call's rows read and written all at once,
 * yet as if one by one; a term's rows in the search index added the same
 * way, up to its limit.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { LedgerEntry, RunClaim } from '../../src/store/importStore.js';
import { encodeEntry } from '../../src/store/ledger.js';
import { idTerm, MAX_TERM_ROWS_TEXT, termDigest } from '../../src/store/searchIndex.js';
import { useStoreOnRedis } from '../support/store.js';

const t = useStoreOnRedis();

const entry = (cells: string[], extra: Partial<LedgerEntry> = {}): LedgerEntry => ({ cells, job: 'customer.create', status: 'pending', attempts: 0, ...extra });

async function newImport(entries: LedgerEntry[]): Promise<string> {
  const id = `scripts-${randomUUID().slice(0, 8)}`;
  await t.store.createImport({ id, file: 's.csv', kind: 'customers', headers: ['FirstName', 'LastName'], paths: ['FirstName', 'LastName'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
  await t.store.putPendingRows(id, entries.map((e, i) => ({ row: i + 1, entry: e })));
  await t.store.markEnqueued(id, entries.length);
  return id;
}

async function run(name: string): Promise<RunClaim> {
  const claim = { token: `${name}:${randomUUID().slice(0, 6)}`, lockKey: `${t.prefix}:subsync-rows:${name}:lock` };
  await t.redis.set(claim.lockKey, claim.token);
  return claim;
}

/** The claims and settles of one row, as claims.test.ts checks them, for a row whose entry is already stored. */
async function expectClaimRules(id: string, row: number, stored: LedgerEntry, name = ''): Promise<void> {
  const first = await run(`a${row}${name}`);
  const second = await run(`b${row}${name}`);
  expect(await t.store.markSent(id, [{ row, entry: stored, expect: 'pending' }], first)).toEqual(['marked']);
  expect(await t.store.markSent(id, [{ row, entry: stored, expect: 'sent' }], second)).toEqual(['claimed']);
  expect(await t.store.updateUnsettledRows(id, [{ row, entry: stored }], second)).toEqual([false]);
  expect(await t.store.settleRows(id, [{ row, entry: { ...stored, status: 'created', customerId: 'C1' }, claim: second }])).toMatchObject({ applied: [false], claimed: [true] });
  expect(await t.store.settleRows(id, [{ row, entry: { ...stored, status: 'created', customerId: 'C1' }, claim: first }])).toMatchObject({ applied: [true], claimed: [false] });
  expect(await t.store.settleRows(id, [{ row, entry: { ...stored, status: 'failed', note: 'x' } }])).toMatchObject({ applied: [false] });
}

describe('entries read without decoding them', () => {
  it('cells holding quotes, backslashes and the ledger\'s own keys mislead no rule', async () => {
    const tricky = [
      entry(['say "s":"created"', 'Berg']),
      entry(['Ana', 'back\\slash "k":"x","l":"y"']),
      entry(['"f":1', '{"s":"sent"}']),
    ];
    const id = await newImport(tricky);
    for (const [i, e] of tricky.entries()) await expectClaimRules(id, i + 1, e);
    expect((await t.store.counts(id)).byStatus.created).toBe(3);
  });

  it('a claim whose token and lock key hold a quote or a backslash is read whole', async () => {
    const id = await newImport([entry(['Ana', 'Lind']), entry(['Bo', 'Berg'])]);
    await expectClaimRules(id, 1, entry(['Ana', 'Lind']), 'q"uote');
    await expectClaimRules(id, 2, entry(['Bo', 'Berg']), 'back\\slash');
  });

  it('entries stored in the former key order (cells first, claim last) are read the same', async () => {
    const id = await newImport([entry(['Ana', 'Lind']), entry(['Bo', 'Berg']), entry(['Cy', 'Dahl'])]);
    const owner = await run('old');
    // As an earlier subsync wrote them: a sent row claimed by a live run, a pending row, a claimed pending row.
    await t.redis.hset(t.store.keys.ledger(id), {
      1: JSON.stringify({ c: ['Ana', 'Lind'], j: 'customer.create', s: 'sent', a: 1, k: owner.token, l: owner.lockKey }),
      2: JSON.stringify({ c: ['Bo', 'Berg'], j: 'customer.create', s: 'pending', a: 0 }),
      3: JSON.stringify({ c: ['Cy', 'Dahl'], j: 'customer.update', s: 'pending', a: 0, f: 1 }),
    });
    const other = await run('new');
    expect(await t.store.markSent(id, [{ row: 1, entry: entry(['Ana', 'Lind']), expect: 'sent' }], other)).toEqual(['claimed']);
    expect(await t.store.settleRows(id, [{ row: 1, entry: entry(['Ana', 'Lind'], { status: 'created' }), claim: other }])).toMatchObject({ claimed: [true] });
    // Cancelling: the unclaimed pending row is refused, the claimed one goes on.
    await t.redis.hset(t.store.keys.runState(id), 'state', 'cancelling');
    expect(await t.store.markSent(id, [{ row: 2, entry: entry(['Bo', 'Berg']), expect: 'pending' }, { row: 3, entry: entry(['Cy', 'Dahl']), expect: 'pending' }], other)).toEqual(['settled', 'marked']);
    await t.redis.del(owner.lockKey);
    expect(await t.store.markSent(id, [{ row: 1, entry: entry(['Ana', 'Lind']), expect: 'sent' }], other)).toEqual(['marked']);
  });

  it('a sent mark is stored with the fields the scripts read first, and read back without its claim', async () => {
    const id = await newImport([entry(['Ana', 'Lind'], { claimed: true })]);
    const owner = await run('first');
    expect(await t.store.markSent(id, [{ row: 1, entry: entry(['Ana', 'Lind'], { claimed: true, attempts: 1 }), expect: 'pending' }], owner)).toEqual(['marked']);
    const text = (await t.redis.hget(t.store.keys.ledger(id), '1')) ?? '';
    expect(text.startsWith(`{"s":"sent","f":1,"k":${JSON.stringify(owner.token)},"l":${JSON.stringify(owner.lockKey)},"c":`)).toBe(true);
    expect(encodeEntry(entry(['Ana', 'Lind'], { claimed: true, attempts: 1 }), owner)).toBe(text);
    expect(await t.store.getRow(id, 1)).toEqual(entry(['Ana', 'Lind'], { claimed: true, attempts: 1, status: 'sent' }));
  });
});

describe('a call\'s rows, read and written at once', () => {
  it('a row named twice in one call is written as if one by one', async () => {
    const id = await newImport([entry(['Ana', 'Lind']), entry(['Bo', 'Berg'])]);
    const owner = await run('twice');
    expect(await t.store.markSent(id, [{ row: 1, entry: entry(['Ana', 'Lind']), expect: 'pending' }, { row: 1, entry: entry(['Ana', 'Lind'], { attempts: 2 }), expect: 'pending' }], owner)).toEqual(['marked', 'marked']);
    expect((await t.store.getRow(id, 1))?.attempts).toBe(2);
    const settled = await t.store.settleRows(id, [
      { row: 1, entry: entry(['Ana', 'Lind'], { status: 'created', customerId: 'C1' }), claim: owner },
      { row: 1, entry: entry(['Ana', 'Lind'], { status: 'failed', note: 'x' }), claim: owner },
      { row: 2, entry: entry(['Bo', 'Berg'], { status: 'failed', note: 'y' }) },
    ]);
    expect(settled).toMatchObject({ applied: [true, false, true], settled: 2, complete: true });
    expect((await t.store.getRow(id, 1))?.status).toBe('created');
    expect((await t.store.counts(id)).byStatus).toMatchObject({ created: 1, failed: 1 });
    // A settled row is written no more: an unsettled write after its settle in the same call is refused.
    expect(await t.store.updateUnsettledRows(id, [{ row: 2, entry: entry(['Bo', 'Berg']) }])).toEqual([false]);
  });

  it('putPendingRows keeps the first entry of a row, in Redis or earlier in the call', async () => {
    const id = await newImport([entry(['Ana', 'Lind'])]);
    await t.store.putPendingRows(id, [
      { row: 1, entry: entry(['Changed']) },
      { row: 2, entry: entry(['Bo', 'Berg']) },
      { row: 2, entry: entry(['Not', 'This']) },
    ]);
    expect((await t.store.getRow(id, 1))?.cells).toEqual(['Ana', 'Lind']);
    expect((await t.store.getRow(id, 2))?.cells).toEqual(['Bo', 'Berg']);
  });

  it('a call of thousands of rows goes through (reads and writes in chunks)', async () => {
    const rows = 2_600;
    const id = await newImport(Array.from({ length: rows }, (_, i) => entry([`F${i}`, 'L'])));
    const settled = await t.store.settleRows(id, Array.from({ length: rows }, (_, i) => ({ row: i + 1, entry: entry([`F${i}`, 'L'], { status: 'created', customerId: `C${i}` }) })));
    expect(settled).toMatchObject({ settled: rows, complete: true });
    expect(settled.applied.every(Boolean)).toBe(true);
    expect(await t.store.rowCount(id)).toBe(rows);
  });
});

describe('the search index, written once per call', () => {
  const rowsOf = async (id: string, value: string): Promise<string | null> => (await t.store.searchTermRows([id], [termDigest(idTerm(value))]))[0]?.[0] ?? null;

  it('rows settled together with one answered id are listed in order, once each', async () => {
    const id = await newImport([entry(['A']), entry(['B']), entry(['C'])]);
    await t.store.settleRows(id, [1, 2, 3].map((row) => ({ row, entry: entry(['x'], { status: 'created', customerId: 'SAME' }) })));
    expect(await rowsOf(id, 'SAME')).toBe('1,2,3');
    // Again (a settle refused: the rows settled already) adds nothing; the producer's terms append.
    await t.store.settleRows(id, [{ row: 1, entry: entry(['x'], { status: 'created', customerId: 'SAME' }) }]);
    await t.store.addSearchTerms(id, new Map([[termDigest(idTerm('SAME')), [7, 8]]]));
    expect(await rowsOf(id, 'SAME')).toBe('1,2,3,7,8');
  });

  it('a term\'s list stops at its limit with one `+`, however many rows one call adds', async () => {
    const id = await newImport([entry(['A']), entry(['B']), entry(['C'])]);
    const digest = termDigest(idTerm('FULL'));
    // A list one character under the limit: the next row is appended, then a single `+`, then nothing.
    const nearlyFull = Array.from({ length: MAX_TERM_ROWS_TEXT }, (_, i) => i + 100).join(',').slice(0, MAX_TERM_ROWS_TEXT - 1);
    await t.redis.hset(t.store.keys.searchIndex(id), Buffer.from(digest, 'latin1'), nearlyFull);
    await t.store.settleRows(id, [1, 2, 3].map((row) => ({ row, entry: entry(['x'], { status: 'created', customerId: 'FULL' }) })));
    expect(await rowsOf(id, 'FULL')).toBe(`${nearlyFull},1,+`);
  });
});
