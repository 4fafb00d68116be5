/**
 * Grouping problem rows by cause: the generalisation that makes one cause of
 * many messages, and one pass over a ledger of 100,000 problem rows written
 * straight into Redis.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { causeOf, errorGroups, generalise } from '../../src/import/errorGroups.js';
import type { LedgerEntry } from '../../src/store/importStore.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

describe('generalise', () => {
  it('replaces digit runs, keeping the words', () => {
    expect(generalise('Subscription.OfferCode: offer LEGACY-2019 is Retired, not Active')).toBe('Subscription.OfferCode: offer LEGACY-<n> is Retired, not Active');
    expect(generalise('offer OLD-1 is Retired, not Active')).toBe('offer OLD-<n> is Retired, not Active');
    // Different words stay different causes.
    expect(generalise('offer LEGACY-2019 is Retired, not Active')).not.toBe(generalise('offer OLD-1 is Retired, not Active'));
    expect(generalise('429 Too Many Requests after 12 attempts')).toBe('<n> Too Many Requests after <n> attempts');
  });

  it('replaces quoted values, double and single, but not apostrophes', () => {
    expect(generalise('field "PostalCode" value "SW1A 1AA" is too long')).toBe('field "…" value "…" is too long');
    expect(generalise("the customer's plan 'Gold Plus' isn't open")).toBe("the customer's plan '…' isn't open");
    expect(generalise('value "a \\"quoted\\" word" refused')).toBe('value "…" refused');
  });

  it('replaces email addresses and GUIDs whole, before their digits', () => {
    expect(generalise('customer ana.silva+2@example.co.uk already exists')).toBe('customer <email> already exists');
    expect(generalise('payment method 6F1C2B9E-3D4A-4C5B-8E7F-0A1B2C3D4E01 not found')).toBe('payment method <guid> not found');
    expect(generalise('customer 123 (bob@x.io) has method 6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e02')).toBe('customer <n> (<email>) has method <guid>');
  });

  it('gives one code to messages that differ only in their particulars, another to other words', () => {
    const failed = (e: string) => causeOf({ status: 'failed', note: e });
    expect(failed('customer 17 not found')?.code).toBe(failed('customer 90210 not found')?.code);
    expect(failed('customer 17 not found')?.code).toMatch(/^failed:[0-9a-f]{8}$/);
    expect(failed('customer 17 not found')?.code).not.toBe(failed('customer 17 is closed')?.code);
    expect(causeOf({ status: 'needs-review', note: 'customer 17 not found' })?.code).toMatch(/^needs-review:[0-9a-f]{8}$/);
    expect(causeOf({ status: 'created' })).toBeUndefined();
  });

  it('an invalid row is grouped by the column and rule of its first message', () => {
    const e = 'row 7 (spreadsheet row 8, line 8), column "EmailAddress": "bob@" is not an email address (rule: email); row 7 (spreadsheet row 8, line 8), column "CountryCode": "GB" is not a three-letter country code (ISO 3166-1 alpha-3, e.g. GBR) (rule: country-code)';
    expect(causeOf({ status: 'invalid', note: e })).toEqual({ code: 'invalid:EmailAddress:email', reason: 'EmailAddress: not an email address (rule: email)' });
    expect(causeOf({ status: 'invalid', note: 'row 3: 4 cells where the header has 3; check for an unquoted comma or a missing cell (rule: column-count)' })).toEqual({
      code: 'invalid:column-count',
      reason: '4 cells where the header has 3; check for an unquoted comma or a missing cell (rule: column-count)',
    });
  });
});

describe('errorGroups', () => {
  it('groups 100,000 ledger entries in one pass', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store } = pipeline.runtime;
    const importId = 'groups-100k';
    await store.createImport({ id: importId, file: 'big.csv', kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAddress'], paths: ['FirstName', 'LastName', 'EmailAddress'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
    const total = 100_000;
    const t0 = Date.UTC(2026, 0, 1);
    // Rows by n % 10: 0-3 failed (one cause, numbers differing), 4-5 failed (another), 6 needs-review, 7-8 invalid email, 9 created.
    const entryOf = (row: number): LedgerEntry => {
      const c = [`First${row}`, 'Last', `p${row}@example.com`];
      switch (row % 10) {
        case 0: case 1: case 2: case 3:
          return { cells: c, job: 'customer.create', status: 'failed', attempts: 1, lastAttemptAt: t0 + row, note: `POST /json/customers: 400: customer ${row} refused: "${c[0]}" is on hold` };
        case 4: case 5:
          return { cells: c, job: 'customer.create', status: 'failed', attempts: 3, lastAttemptAt: t0 + row, note: `retries ran out: 503 Service Unavailable after ${row % 7} seconds` };
        case 6:
          return { cells: c, job: 'customer.create', status: 'needs-review', attempts: 1, lastAttemptAt: t0 + row, note: `2 customers match ${c[2]}: ${row}, ${row + 1}` };
        case 7: case 8:
          return { cells: c, job: null, status: 'invalid', attempts: 0, note: `row ${row} (spreadsheet row ${row + 1}, line ${row + 1}), column "EmailAddress": "x${row}@" is not an email address (rule: email)` };
        default:
          return { cells: c, job: 'customer.create', status: 'created', attempts: 1, lastAttemptAt: t0 + row, customerId: String(row) };
      }
    };
    for (let first = 1; first <= total; first += 5_000) {
      const rows = Array.from({ length: 5_000 }, (_, i) => ({ row: first + i, entry: entryOf(first + i) }));
      await store.settleMany(importId, rows);
    }
    await store.markEnqueued(importId, total);

    const started = performance.now();
    const report = await errorGroups(store, importId);
    const took = performance.now() - started;
    console.log(`grouped ${total} ledger entries into ${report.groups.length} groups in ${took.toFixed(0)} ms`);

    expect(report.groups.map((g) => [g.status, g.count])).toEqual([
      ['failed', 40_000],
      ['failed', 20_000],
      ['invalid', 20_000],
      ['needs-review', 10_000],
    ]);
    const [onHold, unavailable, invalid, review] = report.groups;
    expect(onHold).toMatchObject({ reason: 'POST /json/customers: <n>: customer <n> refused: "…" is on hold', firstSeen: new Date(t0 + 1).toISOString(), lastSeen: new Date(t0 + 100_000).toISOString() });
    expect(onHold?.rows.slice(0, 5)).toEqual([1, 2, 3, 10, 11]);
    expect(unavailable?.rows.every((r) => r % 10 === 4 || r % 10 === 5)).toBe(true);
    expect(invalid).toMatchObject({ code: 'invalid:EmailAddress:email', reason: 'EmailAddress: not an email address (rule: email)', firstSeen: null, lastSeen: null });
    expect(review).toMatchObject({ reason: '<n> customers match <email>: <n>, <n>' });
    expect(review?.code).toMatch(/^needs-review:[0-9a-f]{8}$/);
    expect(report.groups.reduce((n, g) => n + g.rows.length, 0)).toBe(90_000);
  }, 120_000);
});
