import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { detectKind, planColumns } from '../../src/csv/columns.js';
import { openCsv } from '../../src/csv/reader.js';
import { buildSignupRequest, validateRow, type RowOptions } from '../../src/csv/rows.js';
import type { ImportKind } from '../../src/outcomes.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';

const SAMPLES = path.resolve(import.meta.dirname, '../../samples');
const OPTIONS: RowOptions = { expiryFormat: 'MMYY', now: new Date('2026-11-22T00:00:00Z') };

/** Every row's broken rules, by row number (valid rows left out), for one sample file. */
async function check(name: string): Promise<{ kind: ImportKind; rows: number; invalid: Record<number, string[]>; cells: string[][] }> {
  const file = path.join(SAMPLES, name);
  const csv = await openCsv(file);
  const kind = detectKind({ file, headers: csv.headers });
  const plan = planColumns({ file, kind, headers: csv.headers });
  const invalid: Record<number, string[]> = {};
  const cells: string[][] = [];
  for await (const row of csv.rows) {
    cells.push(row.cells);
    const errors = validateRow(plan, row, OPTIONS);
    if (errors.length > 0) invalid[row.row] = errors.map((e) => `${e.column}:${e.rule}`);
  }
  return { kind, rows: cells.length, invalid, cells };
}

describe('samples/', () => {
  it('customers.csv: twelve customers, three of them invalid', async () => {
    const result = await check('customers.csv');
    expect(result).toMatchObject({ kind: 'customers', rows: 12 });
    expect(result.invalid).toEqual({ 10: ['EmailAddress:email'], 11: ['CountryCode:country-code'], 12: ['LastName:required'] });
  });

  it('customer-updates.csv: three seeded customers and one bad CustomerID', async () => {
    const result = await check('customer-updates.csv');
    expect(result).toMatchObject({ kind: 'customers', rows: 4 });
    expect(result.cells.slice(0, 3).map((cells) => cells[0])).toEqual(['100001', '100002', '100003']);
    expect(result.invalid).toEqual({ 4: ['CustomerID:numeric'] });
  });

  it('signups.csv: eight sign-ups, two invalid here and one the service will refuse', async () => {
    const result = await check('signups.csv');
    expect(result).toMatchObject({ kind: 'signups', rows: 8 });
    expect(result.invalid).toEqual({
      6: ['CreditCardInfo.AccountNumber:card-number'],
      7: ['CreditCardInfo.ExpirationDate:expiry'],
    });
    const offers = result.cells.map((cells) => cells[15]);
    expect(new Set(offers)).toEqual(new Set(['STREAM-PLUS', 'NEWS-ANNUAL', 'FIBER-500', 'LEGACY-2019']));
  });

  it('signups.csv: provisioning only on the FIBER-500 rows', async () => {
    const file = path.join(SAMPLES, 'signups.csv');
    const csv = await openCsv(file);
    const plan = planColumns({ file, kind: 'signups', headers: csv.headers });
    for await (const row of csv.rows) {
      const body = buildSignupRequest(plan, row.cells, OPTIONS);
      if (body.Subscription.OfferCode === 'FIBER-500') {
        expect(body.Subscription.SubscriptionItems?.[0]?.ProductCode).toBe('ROUTER');
        expect(body.Subscription.SubscriptionItems?.[0]?.Fields.map((f) => f.ProductFieldCode)).toEqual(['SerialNumber', 'InstallAddress']);
      } else {
        expect(body.Subscription.SubscriptionItems).toBeUndefined();
      }
    }
  });

  it('cards.csv: the seeded payment methods, four good and two bad', async () => {
    const result = await check('cards.csv');
    expect(result).toMatchObject({ kind: 'cards', rows: 6 });
    expect(result.invalid).toEqual({ 5: ['PaymentMethodKey:guid'], 6: ['CVCode:spreadsheet-number'] });
    const keys: readonly string[] = SEED_PAYMENT_METHOD_KEYS;
    for (const cells of result.cells.slice(0, 4)) expect(keys).toContain(cells[0]);
  });
});
