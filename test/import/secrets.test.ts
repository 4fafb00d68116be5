/**
 * Card data and passwords in nothing subsync keeps or prints: a service that
 * echoes the card it was sent (the sandbox's echoCardData fault) and
 * customers files with passwords, scanned in every place: the Redis keys and
 * values under the test's prefix (ledger, job data, failed reasons and
 * stacks, the events streams), the log lines, the result files and the
 * dashboard's pages and downloads.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { FileRejectedError } from '../../src/csv/errors.js';
import { importFile } from '../../src/import/producer.js';
import { retryRows } from '../../src/import/retry.js';
import type { ImportStatus } from '../../src/import/status.js';
import { ROWS_QUEUE, rowJobId } from '../../src/queue/queues.js';
import { CVC_MASK, PASSWORD_MASK } from '../../src/secrets.js';
import { startTestDashboard } from '../support/dashboard.js';
import { importAndFinish, waitFinished } from '../support/imports.js';
import { redisText, startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

/** `prefix` (15 digits) completed with its Luhn check digit. */
function luhn(prefix: string): string {
  let sum = 0;
  for (let i = 0; i < prefix.length; i++) {
    let d = Number(prefix[prefix.length - 1 - i]);
    if (i % 2 === 0) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return `${prefix}${(10 - (sum % 10)) % 10}`;
}

const CARDS = [
  { number: luhn('411111987654321'), cvc: '713' },
  { number: luhn('555555123498765'), cvc: '829' },
  { number: luhn('400005665512345'), cvc: '946' },
  { number: luhn('222300633519526'), cvc: '587' },
  { number: luhn('411111246813579'), cvc: '672' },
  { number: luhn('555555864213579'), cvc: '358' },
];
const KEYS = ['01', '02', '03'].map((n) => `6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e${n}`);

/** Separators a card number or CVC may be written with, in a text or in the JSON of a log line. */
const SEPARATED = '(?:[\\s./_\\-]|\\\\[tn]){0,3}';
/**
 * The card's digits in any form; the CVC standing alone: not in a longer number, a time's milliseconds or a
 * JSON number, nor beside a letter, as digits of a random token are (an import id's last two with its job's
 * row, `…9e64-3`; a lock token's `…db6b784`). Redis holds dozens of such tokens a run, and one of them once
 * read as one of these CVCs (a CI run found `829` in Redis, and no card number anywhere).
 */
function leaks(text: string, secrets: ReadonlyArray<{ number: string; cvc: string }>): string[] {
  const found: string[] = [];
  for (const { number, cvc } of secrets) {
    if (new RegExp([...number].join(SEPARATED)).test(text)) found.push(number);
    if (new RegExp(`(?<![\\dA-Za-z.:*])${[...cvc].join(SEPARATED)}(?![\\dA-Za-z])`).test(text)) found.push(cvc);
  }
  return found;
}

const ResultsSchema = z.array(z.record(z.string(), z.string()));
const readCsv = async (status: ImportStatus, name: string) => ResultsSchema.parse(parse(await readFile(path.join(status.resultsDir ?? '', name), 'utf8'), { columns: true, bom: true }));

/** Everything subsync keeps or prints for these imports, as texts to scan. */
async function everything(p: Pipeline, dashboardUrl: string, imports: ImportStatus[], rows: number[]): Promise<Array<{ where: string; text: string }>> {
  const texts = [
    { where: 'redis', text: await redisText(p.runtime.redis, p.prefix) },
    { where: 'logs', text: p.logs() },
  ];
  const pages = ['/', '/api/imports', `/queues/api/queues?activeQueue=${ROWS_QUEUE}&status=failed&page=1`, `/queues/api/queues?activeQueue=${ROWS_QUEUE}&status=completed&page=1`];
  for (const status of imports) {
    for (const name of ['results.csv', 'errors.csv', 'summary.json']) texts.push({ where: `${status.importId}/${name}`, text: await readFile(path.join(status.resultsDir ?? '', name), 'utf8') });
    const id = status.importId;
    pages.push(`/imports/${id}`, `/api/imports/${id}`, `/imports/${id}/results.csv`, `/imports/${id}/errors.csv`, ...rows.map((row) => `/imports/${id}/rows/${row}`));
  }
  for (const page of pages) {
    const response = await fetch(`${dashboardUrl}${page}`);
    expect(response.status, page).toBe(200);
    texts.push({ where: page, text: await response.text() });
  }
  return texts;
}

describe('a service that echoes the card it was sent', () => {
  it('leaves no card number or CVC, in any form, in anything subsync keeps or prints', async () => {
    pipeline = await startPipeline({ faults: { echoCardData: 1, echoCardDataStatus: 400 } });
    const dashboard = await startTestDashboard(pipeline, null);
    const signups = CARDS.slice(0, 3);
    const cards = CARDS.slice(3);

    // Declined for good (400): the API's words reach the ledger, the results and the dashboard.
    const signupsFile = await pipeline.file(
      'echo-signups.csv',
      [
        'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,CreditCardInfo.CVCode,Subscription.OfferCode',
        ...signups.map((c, i) => `Echo${i},Signup,echo${i}@example.com,${c.number},1230,${c.cvc},STREAM-PLUS`),
      ].join('\n'),
    );
    const declined = await importAndFinish(pipeline, signupsFile, { attempts: 2 });

    // A 5xx, switched on at run time: retried (failed reasons, stacks, the events stream), then out of retries.
    const switched = await fetch(`${pipeline.sandbox.url}/_sandbox/faults`, { method: 'PUT', body: JSON.stringify({ echoCardDataStatus: 500 }) });
    expect(switched.status).toBe(200);
    const cardsFile = await pipeline.file(
      'echo-cards.csv',
      ['PaymentMethodKey,AccountNumber,ExpirationDate,CVCode', ...cards.map((c, i) => `${KEYS[i]},${c.number},1230,${c.cvc}`)].join('\n'),
    );
    const retried = await importAndFinish(pipeline, cardsFile, { attempts: 2 });

    // The fault did its part: every request carrying a card was refused quoting it.
    expect(pipeline.sandbox.stats().faults.echoedCardData).toBeGreaterThanOrEqual(signups.length + 2 * cards.length);
    expect(declined.counts.failed).toBe(signups.length);
    expect(retried.counts.failed).toBe(cards.length);
    const reasons = [...(await readCsv(declined, 'results.csv')), ...(await readCsv(retried, 'results.csv'))].map((r) => r._error ?? '');
    for (const reason of reasons) expect(reason).toMatch(/card \*{12}\d{4} \(\*{12}\d{4}\) cvc \*{3}/i);
    expect(reasons.filter((r) => r.startsWith('retries ran out'))).toHaveLength(cards.length);
    const failedJobs = await pipeline.runtime.queues.rows.getFailed();
    expect(failedJobs.length).toBe(signups.length + cards.length);
    for (const job of failedJobs) {
      expect(job.failedReason).toContain(`cvc ${CVC_MASK}`);
      expect((job.stacktrace ?? []).join('\n')).not.toBe('');
    }
    expect(pipeline.logs()).toContain(`cvc ${CVC_MASK}`);

    const texts = await everything(pipeline, dashboard.url, [declined, retried], [1, 2, 3]);
    const hits = texts.flatMap(({ where, text }) => leaks(text, CARDS).map((secret) => `${secret} in ${where}`));
    expect(hits).toEqual([]);
    // The scan finds what it looks for: the input files hold every card and CVC.
    const input = (await readFile(signupsFile, 'utf8')) + (await readFile(cardsFile, 'utf8'));
    expect(leaks(input, CARDS)).toHaveLength(2 * CARDS.length);
    expect(leaks('refused: 4111.1198.7654.3216', CARDS).length + leaks('cvc 7-1-3.', CARDS).length).toBeGreaterThan(0);
  });
});

describe('passwords', () => {
  const PASSWORDS = ['Ada-pa55word!', 'Bad-pa55word!', 'Nobody-pa55word!'];
  const customersCsv = (customerId: string): string =>
    [
      'CustomerID,FirstName,LastName,EmailAddress,Password',
      `,Ada,Lovelace,ada.pw@example.com,${PASSWORDS[0]}`,
      `,Bad,Email,bad@,${PASSWORDS[1]}`,
      `${customerId},Nobody,Here,nobody.pw@example.com,${PASSWORDS[2]}`,
      ',Grace,Hopper,grace.pw@example.com,',
    ].join('\n');
  const passwordLeaks = (text: string): string[] => PASSWORDS.filter((p) => text.includes(p) || text.includes(JSON.stringify(p).slice(1, -1)));

  it('are sent, and kept only sealed: the ledger, logs, result files and dashboard show a mask, and the edit form keeps the held one', async () => {
    pipeline = await startPipeline();
    const dashboard = await startTestDashboard(pipeline, null);
    const file = await pipeline.file('passwords.csv', customersCsv('999999'));
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ created: 2, invalid: 1, failed: 1 });

    const results = await readCsv(status, 'results.csv');
    expect(results.map((r) => r.Password)).toEqual([PASSWORD_MASK, PASSWORD_MASK, PASSWORD_MASK, '']);
    expect(pipeline.sandbox.store.passwordOf(results[0]?._customerId ?? '')).toBe(PASSWORDS[0]);
    expect(pipeline.sandbox.store.passwordOf(results[3]?._customerId ?? '')).toBe('');

    // The edit form: no password in it, an empty password field that keeps the one held.
    const form = await (await fetch(`${dashboard.url}/imports/${status.importId}/rows/3`)).text();
    expect(form).toMatch(/<input type="password" name="card.Password" value="" autocomplete="new-password" >/);
    expect(form).toContain('Leave empty to keep the password held for this row.');
    expect(form).not.toContain(`value="${PASSWORD_MASK}"`);

    const texts = await everything(pipeline, dashboard.url, [status], [2, 3]);
    const hits = texts.flatMap(({ where, text }) => passwordLeaks(text).map((secret) => `${secret} in ${where}`));
    expect(hits).toEqual([]);

    // Saved from the form with an existing customer and the password left empty: the held one is sent.
    const target = pipeline.sandbox.store.customers()[0]?.CustomerID ?? '';
    const page = await fetch(`${dashboard.url}/imports/${status.importId}/rows/3`);
    const cookie = (page.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? '';
    const fields = new URLSearchParams({ _csrf: csrf, 'cell.0': target, 'cell.1': 'Nobody', 'cell.2': 'Here', 'cell.3': 'nobody.pw@example.com', 'card.Password': '' });
    const saved = await fetch(`${dashboard.url}/imports/${status.importId}/rows/3`, { method: 'POST', body: fields, redirect: 'manual', headers: { cookie, origin: dashboard.url } });
    expect(saved.status).toBe(303);
    expect(new URL(saved.headers.get('location') ?? '/', 'http://x').searchParams.get('notice')).toContain('row 3 saved and queued again (customer.update)');
    await waitFinished(pipeline, status.importId, (s) => s.counts.updated === 1);
    expect(pipeline.sandbox.store.passwordOf(target)).toBe(PASSWORDS[2]);
    expect(passwordLeaks(await redisText(pipeline.runtime.redis, pipeline.prefix))).toEqual([]);
  });

  it('a file with a password is refused without SUBSYNC_CARD_KEY; errors.csv dropped back refuses the mask rather than send it', async () => {
    pipeline = await startPipeline();
    const { store, queues, keyring, logger } = pipeline.runtime;
    const file = await pipeline.file('passwords.csv', customersCsv('999999'));
    const refused = importFile({ file, sendEmptyPasswords: true }, { store, queues, keyring: undefined, logger });
    await expect(refused).rejects.toBeInstanceOf(FileRejectedError);
    await expect(refused).rejects.toThrow(/the file holds passwords \(row 1 has one in its Password column\), and passwords are only queued encrypted: set SUBSYNC_CARD_KEY/);
    // An empty Password column holds nothing to seal.
    const blank = await pipeline.file('blank-passwords.csv', 'FirstName,LastName,EmailAddress,Password\nEmpty,Password,empty.pw@example.com,\n');
    expect((await importFile({ file: blank }, { store, queues, keyring: undefined, logger })).outcome).toBe('enqueued');

    const status = await importAndFinish(pipeline, file);
    const errorsCsv = await readFile(path.join(status.resultsDir ?? '', 'errors.csv'), 'utf8');
    expect(errorsCsv).toContain(PASSWORD_MASK);
    const dropped = await pipeline.file('errors-again.csv', errorsCsv.replace('bad@', 'bad.pw@example.com'));
    const before = pipeline.sandbox.store.customerCount();
    const again = await importFile({ file: dropped }, { store, queues, keyring, logger });
    expect(again.outcome).toBe('enqueued');
    if (again.outcome !== 'enqueued') return;
    expect(again.invalid).toBe(2);
    expect(again.errors.map((e) => e.rule)).toEqual(['password-withheld', 'password-withheld']);
    expect(again.errors[0]?.message).toMatch(/column "Password": holds \*{8}, which subsync writes in its result files in place of a password/);
    await waitFinished(pipeline, again.importId);
    expect(pipeline.sandbox.store.customerCount()).toBe(before);

    // A retry of a row whose job (and sealed password) is gone is refused: the mask is never sent.
    const job = await pipeline.runtime.queues.rows.getJob(rowJobId(status.importId, 3));
    await job?.remove();
    const retry = await retryRows(store, queues, status.importId, 3);
    expect(retry.retried).toEqual([]);
    expect(retry.skipped[0]?.reason).toMatch(/its password is no longer held/);
  });
});
