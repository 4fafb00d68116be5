/**
 * `subsync errors` and `subsync retry --group` on a real import: invalid rows
 * of two rules and sign-ups the sandbox refuses for two causes (a retired
 * offer, offers that do not exist), the built CLI against real Redis.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { importFile } from '../../src/import/producer.js';
import { importStatus } from '../../src/import/status.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { envOf, startPipeline, until, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

const GroupsSchema = z.object({
  importId: z.string(),
  groups: z.array(z.object({ code: z.string(), reason: z.string(), status: z.string(), count: z.number(), firstSeen: z.string().nullable(), lastSeen: z.string().nullable(), rows: z.array(z.number()) })),
});

const HEADER = 'Customer.FirstName,Customer.LastName,Customer.EmailAddress,Customer.CountryCode,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,Subscription.OfferCode';
const ROWS = [
  'Ana,Groups,ana@example.com,GBR,4111111111111111,1230,LEGACY-2019', // 1 failed: retired
  'Ben,Groups,bob@,GBR,4111111111111111,1230,STREAM-PLUS', // 2 invalid: email
  'Cy,Groups,cy@,GB,4111111111111111,1230,STREAM-PLUS', // 3 invalid: email first, country too
  'Dee,Groups,dee@example.com,GB,4111111111111111,1230,STREAM-PLUS', // 4 invalid: country
  'Eve,Groups,eve@example.com,GBR,4111111111111111,1230,GONE-1', // 5 failed: no such offer
  'Fay,Groups,fay@example.com,GBR,4111111111111111,1230,LEGACY-2019', // 6 failed: retired
  'Gus,Groups,gus@example.com,GBR,4111111111111111,1230,GONE-22', // 7 failed: no such offer
  'Hal,Groups,hal@example.com,GBR,4111111111111111,1230,LEGACY-2019', // 8 failed: retired
];

async function settledImport(p: Pipeline): Promise<string> {
  const { store, queues, keyring, logger } = p.runtime;
  const result = await importFile({ file: await p.file('groups.csv', `${HEADER}\n${ROWS.join('\n')}\n`) }, { store, queues, keyring, logger });
  await until(async () => ((await importStatus(store, result.importId))?.finished ? true : undefined), 'the import to settle');
  return result.importId;
}

async function groupsOf(p: Pipeline, importId: string) {
  const run = subsync(['errors', importId, '--json'], envOf(p));
  expect((await run.exited).code).toBe(0);
  return GroupsSchema.parse(JSON.parse(run.stdout()));
}

const RETIRED = 'failed:9f6212c3';
const MISSING = 'failed:e7b0660a';

describe('errors and retry --group', () => {
  it('groups invalid rows by column and rule, failed rows by their generalised reason; retry --group refuses invalid groups and unknown codes, and --dry-run sends nothing', async () => {
    pipeline = await startPipeline();
    const importId = await settledImport(pipeline);
    const report = await groupsOf(pipeline, importId);
    expect(report.importId).toBe(importId);
    expect(report.groups.map(({ firstSeen, lastSeen, ...group }) => group)).toEqual([
      { code: RETIRED, reason: 'Subscription.OfferCode: offer LEGACY-<n> is Retired, not Active (API_REFUSED <n>)', status: 'failed', count: 3, rows: [1, 6, 8] },
      // GONE-1 and GONE-22: the same words once their digits are generalised.
      { code: MISSING, reason: 'Subscription.OfferCode: offer GONE-<n> does not exist (API_REFUSED <n>)', status: 'failed', count: 2, rows: [5, 7] },
      { code: 'invalid:Customer.EmailAddress:email', reason: 'Customer.EmailAddress: not an email address (rule: email)', status: 'invalid', count: 2, rows: [2, 3] },
      { code: 'invalid:Customer.CountryCode:country-code', reason: 'Customer.CountryCode: not a three-letter country code (ISO 3166-1 alpha-3, e.g. GBR) (rule: country-code)', status: 'invalid', count: 1, rows: [4] },
    ]);
    for (const group of report.groups) {
      if (group.status === 'invalid') expect([group.firstSeen, group.lastSeen]).toEqual([null, null]);
      else expect(Date.parse(group.firstSeen ?? '')).toBeLessThanOrEqual(Date.parse(group.lastSeen ?? ''));
    }

    const text = subsync(['errors', importId], envOf(pipeline));
    expect((await text.exited).code).toBe(0);
    expect(text.stdout().trim().split('\n')).toEqual([
      `3  ${RETIRED}  Subscription.OfferCode: offer LEGACY-<n> is Retired, not Active (API_REFUSED <n>)  rows 1, 6, 8`,
      `2  ${MISSING}  Subscription.OfferCode: offer GONE-<n> does not exist (API_REFUSED <n>)  rows 5, 7`,
      '2  invalid:Customer.EmailAddress:email  Customer.EmailAddress: not an email address (rule: email)  rows 2, 3',
      '1  invalid:Customer.CountryCode:country-code  Customer.CountryCode: not a three-letter country code (ISO 3166-1 alpha-3, e.g. GBR) (rule: country-code)  rows 4',
    ]);

    const { store, queues } = pipeline.runtime;
    const before = await store.getRows(importId, [1, 2, 3, 4, 5, 6, 7, 8]);
    const calls = (await store.counts(importId)).apiCalls;
    // A settled sign-up import no longer holds its card numbers: the dry run says so rather than count rows that could not be sent.
    const dry = subsync(['retry', importId, '--group', RETIRED, '--dry-run', '--json'], envOf(pipeline));
    expect((await dry.exited).code).toBe(0);
    const noCard = 'its card data is no longer held; import the corrected row again';
    expect(JSON.parse(dry.stdout())).toEqual({
      importId, group: RETIRED, reason: 'Subscription.OfferCode: offer LEGACY-<n> is Retired, not Active (API_REFUSED <n>)', status: 'failed', dryRun: true, rows: 0, mayCreate: 0, retried: [],
      skipped: [1, 6, 8].map((row) => ({ row, reason: noCard })),
    });

    const invalid = subsync(['retry', importId, '--group', 'invalid:Customer.EmailAddress:email'], envOf(pipeline));
    expect((await invalid.exited).code).toBe(EXIT_CODES.usage);
    expect(invalid.stderr().split('\n').filter((l) => l.startsWith('subsync:'))).toEqual(['subsync: group invalid:Customer.EmailAddress:email holds invalid rows, which retry never sends: fix them and import them again, or edit them in the dashboard']);
    const unknown = subsync(['retry', importId, '--group', 'failed:00000000'], envOf(pipeline));
    expect((await unknown.exited).code).toBe(EXIT_CODES.usage);
    expect(unknown.stderr().split('\n').filter((l) => l.startsWith('subsync:'))).toEqual([`subsync: import ${importId} has no rows in group failed:00000000 (\`subsync errors ${importId}\` lists its groups)`]);

    const missing = subsync(['errors', 'no-such-import', '--json'], envOf(pipeline));
    expect((await missing.exited).code).toBe(EXIT_CODES.notFound);
    expect(missing.stdout()).toBe('');

    // Nothing sent, nothing reopened.
    expect(await store.getRows(importId, [1, 2, 3, 4, 5, 6, 7, 8])).toEqual(before);
    expect((await store.counts(importId)).apiCalls).toBe(calls);
    expect((await store.getImport(importId))?.round).toBe(0);
    expect(await queues.rows.getWaitingCount()).toBe(0);
  }, 90_000);

  it('retry --group --dry-run counts the rows and the creates; retry --group sends exactly that group\'s rows', async () => {
    // Every request fails: creates end needs-review (they may have been applied), updates end failed.
    pipeline = await startPipeline({ faults: { errorRate: 1 } });
    const { store, queues, keyring, logger } = pipeline.runtime;
    const file = await pipeline.file('faults.csv', 'CustomerID,FirstName,LastName\n,Ria,Review\n,Rob,Review\n41,Fia,Failed\n42,Fin,Failed\n');
    const result = await importFile({ file, attempts: 2, allowDuplicates: true, sendEmptyPasswords: true }, { store, queues, keyring, logger });
    const importId = result.importId;
    await until(async () => ((await importStatus(store, importId))?.finished ? true : undefined), 'the import to settle');
    const groups = (await groupsOf(pipeline, importId)).groups;
    expect(groups.map((g) => [g.status, g.rows])).toEqual([['failed', [3, 4]], ['needs-review', [1, 2]]]);
    const review = groups[1]?.code ?? '';
    expect(review).toMatch(/^needs-review:[0-9a-f]{8}$/);
    const before = await store.getRows(importId, [1, 2, 3, 4]);

    const dry = subsync(['retry', importId, '--group', review, '--dry-run'], envOf(pipeline));
    expect((await dry.exited).code).toBe(0);
    expect(dry.stdout()).toBe(`would send 2 row(s) of group ${review} (${groups[1]?.reason ?? ''}); 2 of them may create customers or subscriptions; nothing sent\n`);
    const failedDry = subsync(['retry', importId, '--group', groups[0]?.code ?? '', '--dry-run', '--json'], envOf(pipeline));
    expect((await failedDry.exited).code).toBe(0);
    expect(JSON.parse(failedDry.stdout())).toMatchObject({ rows: 2, mayCreate: 0, retried: [], skipped: [] });
    expect(await store.getRows(importId, [1, 2, 3, 4])).toEqual(before);
    expect((await store.getImport(importId))?.round).toBe(0);

    pipeline.sandbox.setFaults({ errorRate: 0 });
    pipeline.sandbox.resetStats();
    const run = subsync(['retry', importId, '--group', review, '--json'], envOf(pipeline));
    expect((await run.exited).code).toBe(0);
    expect(JSON.parse(run.stdout())).toMatchObject({ group: review, dryRun: false, rows: 2, mayCreate: 2, retried: [1, 2], skipped: [] });
    await until(async () => {
      const record = await store.getImport(importId);
      return record?.round !== undefined && record.round > 0 && record.finishedAt !== undefined ? true : undefined;
    }, 'the retried rows to settle');
    const after = await store.getRows(importId, [1, 2, 3, 4]);
    expect(after.map((e) => e?.status)).toEqual(['created', 'created', 'failed', 'failed']);
    expect(after.slice(2)).toEqual(before.slice(2));
    // Only the group's two creates were sent (each read back first: it may have been applied).
    expect(pipeline.sandbox.stats().byEndpoint.createCustomer).toBe(2);
    expect(pipeline.sandbox.stats().byEndpoint.updateCustomer ?? 0).toBe(0);
  }, 90_000);
});
