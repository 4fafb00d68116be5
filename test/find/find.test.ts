/**
 * Search by email, name, CustomerID and PaymentMethodKey across imports, on
 * real Redis and the sandbox: ids the service answered are found once the
 * rows settle; card data is never indexed, never searched, never echoed.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { findRows, isCardShaped, shownQuery } from '../../src/import/find.js';
import { nameSplits, queryTerms, rowTermDigests, searchableCells, termsOf } from '../../src/import/searchTerms.js';
import { planOf } from '../../src/store/plan.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { MAX_TERM_ROWS_TEXT, parseTermRows, termDigest } from '../../src/store/searchIndex.js';
import { editAndRetryRow } from '../../src/import/edit.js';
import { importAndFinish, SIGNUPS_CSV, waitFinished } from '../support/imports.js';
import { redisText, startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

describe('search terms', () => {
  it('normalises a row\'s email, names and ids as a search text is normalised', () => {
    const terms = termsOf({ email: ' Ana.Silva@Example.COM ', firstName: 'Amélie', lastName: "O'Neil  Brown", customerId: ' 1042 ', paymentMethodKey: '{6F1C2B9E-3D4A-4C5B-8E7F-0A1B2C3D4E01}' });
    expect(terms).toEqual([
      { term: 'ana.silva@example.com', field: 'email', indexed: true },
      { term: 'amélie', field: 'name', indexed: true },
      { term: "o'neil brown", field: 'name', indexed: true },
      // Compared, not indexed: a search of several words looks its halves up.
      { term: "amélie o'neil brown", field: 'name', indexed: false },
      { term: '1042', field: 'customerId', indexed: true },
      { term: '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01', field: 'paymentMethodKey', indexed: true },
    ]);
    expect(nameSplits(" Amélie  O'Neil Brown")).toEqual([['amélie', "o'neil brown"], ["amélie o'neil", 'brown']]);
    expect(nameSplits('Cher')).toEqual([]);
    // The same person typed another way searches the same terms.
    expect(queryTerms('  ANA.SILVA@example.com')).toContain('ana.silva@example.com');
    expect(queryTerms('Ame\u0301lie')).toContain('amélie');
    expect(queryTerms('6F1C2B9E-3D4A-4C5B-8E7F-0A1B2C3D4E01')).toContain('6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01');
    expect(queryTerms('   ')).toEqual([]);
  });

  it("indexes each row's terms as termsOf names them, however its values repeat one another", () => {
    const texts = ['', 'Ann', 'ann', ' ANN ', 'Bo', 'ann bo', 'Ann Bo', 'ann@x.example', '42', 'abc-1', 'Ame\u0301lie', '42 '];
    for (const email of texts) {
      for (const firstName of texts) {
        for (const lastName of texts) {
          for (const customerId of ['', '42', 'ann', 'ann bo', 'ann@x.example']) {
            for (const paymentMethodKey of ['', '42', 'abc-1', 'bo', 'ann bo']) {
              const values = { email, firstName, lastName, customerId, paymentMethodKey };
              const indexed = termsOf(values).filter((t) => t.indexed).map((t) => termDigest(t.term));
              expect(rowTermDigests(values)).toEqual(indexed);
            }
          }
        }
      }
    }
  });

  it('never reads a card column', () => {
    const plan = planOf({ id: 'x', file: 'c.csv', kind: 'cards', headers: ['PaymentMethodKey', 'AccountNumber', 'ExpirationDate'], paths: ['PaymentMethodKey', 'AccountNumber', 'ExpirationDate'], options: { expiryFormat: 'MMYY', attempts: 1 }, createdAt: 0, state: 'enqueued', round: 0, total: 1, lastSettledAt: undefined, finishedAt: undefined, resultsDir: undefined, batchRows: undefined });
    const values = searchableCells(plan, ['abc-1', '4111111111111111', '1230']);
    expect(values).toEqual({ email: '', firstName: '', lastName: '', customerId: '', paymentMethodKey: 'abc-1' });
    expect(rowTermDigests(values)).toEqual([termDigest('abc-1')]);
  });

  it('tells a card number from a GUID, and masks only the card number', () => {
    expect(isCardShaped('4111 1111 1111 1111')).toBe(true);
    expect(isCardShaped('5555555555554444')).toBe(true);
    expect(shownQuery('5555555555554444')).toBe('************4444');
    expect(isCardShaped('12345678-1234-4234-8234-123456789012')).toBe(false);
    expect(isCardShaped('ana@example.com')).toBe(false);
    expect(isCardShaped('1042')).toBe(false);
  });

  it('keeps a term\'s rows bounded, marking that some were left out', () => {
    expect(parseTermRows('3,1,3,2')).toEqual({ rows: [1, 2, 3], truncated: false });
    expect(parseTermRows('1,2,+')).toEqual({ rows: [1, 2], truncated: true });
    expect(MAX_TERM_ROWS_TEXT).toBeGreaterThan(1000);
  });
});

describe('findRows', () => {
  it('finds rows of every import by email, name, CustomerID and PaymentMethodKey, and nothing for a card number', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline();
    const { store, redis } = pipeline.runtime;
    const people = await importAndFinish(pipeline, await pipeline.file('people.csv', 'FirstName,LastName,EmailAddress\nAna,Silva,Ana.Silva@example.com\nBo,Berg,bo@example.com\nAna,Lopez,not-an-email\n'));
    const signups = await importAndFinish(pipeline, await pipeline.file('signups.csv', SIGNUPS_CSV));

    // By email, whatever its case; the row that created her has her new CustomerID.
    const byEmail = await findRows(store, 'ANA.SILVA@EXAMPLE.COM');
    expect(byEmail.hits).toHaveLength(1);
    const ana = byEmail.hits[0];
    expect(ana).toMatchObject({ importId: people.importId, file: 'people.csv', row: 1, status: 'created', matched: 'email', email: 'Ana.Silva@example.com' });
    expect(ana?.customerId).toMatch(/\S/);

    // By that CustomerID, known only once the row settled.
    expect((await findRows(store, ana?.customerId ?? '?')).hits.map((h) => [h.importId, h.row, h.matched])).toEqual([[people.importId, 1, 'customerId']]);

    // By first name: both Anas, the invalid row too; by full name, one.
    expect((await findRows(store, 'ana')).hits.map((h) => [h.row, h.status])).toEqual([[1, 'created'], [3, 'invalid']]);
    expect((await findRows(store, 'Ana  Lopez')).hits.map((h) => h.row)).toEqual([3]);
    expect((await findRows(store, 'Bo Silva')).hits).toEqual([]);

    // An invalid row fixed in the dashboard: found by its new email, no longer by its old one.
    await editAndRetryRow(store, pipeline.runtime.queues, pipeline.runtime.keyring, people.importId, 3, { EmailAddress: 'ana.lopez@example.com' }, {});
    await waitFinished(pipeline, people.importId, (s) => s.counts.invalid === 0);
    expect((await findRows(store, 'ana.lopez@example.com')).hits.map((h) => [h.row, h.status, h.matched])).toEqual([[3, 'created', 'email']]);
    expect((await findRows(store, 'not-an-email')).hits).toEqual([]);
    // Newest import first: a sign-up by last name.
    expect((await findRows(store, 'poulain')).hits.map((h) => [h.importId, h.row, h.status])).toEqual([[signups.importId, 1, 'signed-up']]);

    // A card update by its PaymentMethodKey, written with braces and capitals in the file.
    const cards = await importAndFinish(pipeline, await pipeline.file('cards.csv', `PaymentMethodKey,AccountNumber,ExpirationDate,CVCode\n{${SEED_PAYMENT_METHOD_KEYS[0].toUpperCase()}},4111111111111111,1230,737\n`));
    expect(cards.counts.updated).toBe(1);
    expect((await findRows(store, SEED_PAYMENT_METHOD_KEYS[0])).hits.map((h) => [h.importId, h.row, h.matched, h.status])).toEqual([[cards.importId, 1, 'paymentMethodKey', 'updated']]);

    // A card number of the file: never searched, shown masked, and never an index term.
    for (const card of ['4111111111111111', '5555 5555 5555 4444']) {
      const result = await findRows(store, card);
      expect(result).toMatchObject({ hits: [], refused: true });
      expect(result.shown).not.toMatch(/\d{5}/);
    }
    for (const id of [people.importId, signups.importId, cards.importId]) {
      const fields = (await redis.hkeysBuffer(store.keys.searchIndex(id))).map((field) => field.toString('latin1'));
      expect(fields).toContain(termDigest(id === cards.importId ? SEED_PAYMENT_METHOD_KEYS[0] : id === people.importId ? 'ana.silva@example.com' : 'poulain'));
      for (const secret of ['4111111111111111', '5555555555554444', '737', '123']) expect(fields).not.toContain(termDigest(secret));
    }
    // The index expires with its import.
    expect(await redis.ttl(store.keys.searchIndex(people.importId))).toBeGreaterThan(0);
    // Nothing subsync keeps, search index and series included, holds a card number.
    const kept = await redisText(redis, pipeline.prefix);
    expect(kept).not.toMatch(/4111111111111111|5555555555554444/);

    // Part of an email is not a term; a name nobody has finds nothing.
    expect((await findRows(store, 'example.com')).hits).toEqual([]);
    expect((await findRows(store, 'Zed')).hits).toEqual([]);
    expect((await findRows(store, 'Zed')).imports).toBe(3);
  });

  it('stops at the limit and says more match', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline({ workers: false });
    const { store, queues, keyring, logger } = pipeline.runtime;
    const { importFile } = await import('../../src/import/producer.js');
    const lines = ['FirstName,LastName,EmailAddress', ...Array.from({ length: 30 }, (_, i) => `Sam,Lee${i},sam${i}@example.com`)];
    const result = await importFile({ file: await pipeline.file('sams.csv', lines.join('\n')) }, { store, queues, keyring, logger });
    expect(result.outcome).toBe('enqueued');
    const found = await findRows(store, 'sam', { limit: 10 });
    expect(found.hits.map((h) => h.row)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(found.hits[0]?.status).toBe('pending');
    expect(found.more).toBe(true);
    expect((await findRows(store, 'sam', { limit: 30 })).more).toBe(false);
    expect((await findRows(store, 'sam17@example.com')).hits.map((h) => h.row)).toEqual([18]);
  });
});
