/**
 * Webhook notifications end to end: a real receiver on 127.0.0.1 behind
 * SUBSYNC_WEBHOOK_URL, the sandbox over HTTP, real Redis and the control
 * worker delivering. Signatures are checked the way a receiver would.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { enqueueExport } from '../../src/export/job.js';
import { eventIdOf } from '../../src/notify/events.js';
import { createNotifier, NOTIFY_JOB, postNotification } from '../../src/notify/notifier.js';
import { createLogger } from '../../src/log.js';
import { webhookAnswer } from '../../src/policy.js';
import { importAndFinish } from '../support/imports.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';
import { startReceiver, type Received, type Receiver } from './receiver.js';

const SECRET = 'webhook-test-secret-5d1e';
const DASHBOARD = 'http://127.0.0.1:8080';

let pipeline: Pipeline | undefined;
let receiver: Receiver | undefined;
afterEach(async () => {
  await pipeline?.close();
  await receiver?.close();
  pipeline = undefined;
  receiver = undefined;
});

/** What a receiver does: recompute the HMAC of the raw body and compare in constant time. */
function signatureVerifies(request: Received, secret: string): boolean {
  const header = request.headers['x-subsync-signature'];
  if (typeof header !== 'string' || !header.startsWith('sha256=')) return false;
  const expected = Buffer.from(createHmac('sha256', secret).update(request.body, 'utf8').digest('hex'), 'hex');
  const given = Buffer.from(header.slice('sha256='.length), 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const BodySchema = z.object({
  id: z.string(),
  event: z.string(),
  at: z.string(),
  importId: z.string().optional(),
  export: z.string().optional(),
  file: z.string().optional(),
  state: z.string().optional(),
  counts: z.record(z.string(), z.number()).optional(),
  failures: z.array(z.object({ code: z.string(), reason: z.string(), count: z.number() })).optional(),
  error: z.string().optional(),
  complete: z.boolean().optional(),
  links: z.record(z.string(), z.string()),
  text: z.string(),
});

const silent = createLogger({ level: 'silent' });

describe('webhook notifications', () => {
  it('tells a signed import.finished with counts, failures and links, without the card numbers and CVCs that the file name and the API\'s words carried', { timeout: 60_000 }, async () => {
    receiver = await startReceiver();
    // The service refuses every card, quoting its number plain and dotted, and its CVC.
    pipeline = await startPipeline({ faults: { echoCardData: 1, echoCardDataStatus: 400 }, config: { webhookUrl: receiver.url, webhookSecret: SECRET, dashboardUrl: DASHBOARD } });
    const cards = [
      { number: '4111111111111111', cvc: '737' },
      { number: '5555555555554444', cvc: '829' },
    ];
    const file = await pipeline.file(
      // Someone named the file after a card.
      'signups 4111 1111 1111 1111.csv',
      [
        'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,CreditCardInfo.CVCode,Subscription.OfferCode',
        ...cards.map((c, i) => `Echo${i},Signup,echo${i}@example.com,${c.number},1230,${c.cvc},STREAM-PLUS`),
        'Bad,Row,not-an-email,4000056655665556,1230,123,STREAM-PLUS',
      ].join('\n'),
    );
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ failed: 2, invalid: 1 });
    expect(pipeline.sandbox.stats().faults.echoedCardData).toBeGreaterThanOrEqual(2);

    const request = await until(async () => receiver?.received[0], 'the notification');
    expect(signatureVerifies(request, SECRET)).toBe(true);
    expect(signatureVerifies(request, 'another-secret-entirely')).toBe(false);
    expect(request.headers['content-type']).toBe('application/json');
    expect(request.headers['x-subsync-event']).toBe('import.finished');
    const body = BodySchema.parse(JSON.parse(request.body));
    expect(body).toMatchObject({
      id: eventIdOf({ event: 'import.finished', importId: status.importId, round: 0 }),
      event: 'import.finished',
      importId: status.importId,
      state: 'finished with failures',
      counts: { failed: 2, invalid: 1, settled: 3, total: 3 },
      links: { import: `${DASHBOARD}/imports/${status.importId}` },
    });
    expect(request.headers['x-subsync-delivery']).toBe(body.id);
    // The file name keeps its last four only; the API's refusal is named, masked.
    expect(body.file).toBe('signups ************1111.csv');
    expect(body.failures?.map((f) => f.count).sort()).toEqual([1, 2]);
    // The service's words, its card quotes masked where they were stored, the numbers generalised by the grouping.
    expect(body.failures?.find((f) => f.count === 2)?.reason).toBe('Card ************<n> (************<n>) cvc *** was declined (API_REFUSED <n>)');
    // Readable as a Slack message: what happened and a link.
    expect(body.text).toContain(`import ${status.importId} (signups ************1111.csv) finished with failures: 1 invalid, 2 failed`);
    expect(body.text).toContain(`<${DASHBOARD}/imports/${status.importId}|Open>`);

    for (const card of [...cards, { number: '4000056655665556', cvc: '123' }]) {
      expect(request.body).not.toContain(card.number);
      expect(request.body).not.toContain(card.number.replace(/(\d{4})(?=\d)/g, '$1.'));
      expect(request.body).not.toContain(card.number.replace(/(\d{4})(?=\d)/g, '$1 '));
      for (const failure of body.failures ?? []) expect(failure.reason).not.toMatch(new RegExp(`\\b${card.cvc}\\b`));
    }
    expect(request.body).not.toMatch(/\d{12,}/);
  });

  it('names failing rows of a customers file with passwords without any password', { timeout: 60_000 }, async () => {
    receiver = await startReceiver();
    pipeline = await startPipeline({ config: { webhookUrl: receiver.url, webhookSecret: SECRET } });
    const passwords = ['Hunter2-Secret!', 'Corr3ct-Horse-Battery', 'Tr0ub4dor&3x'];
    const file = await pipeline.file(
      'updates.csv',
      ['CustomerID,EmailAddress,Password', `999991,a@example.com,${passwords[0]}`, `999992,b@example.com,${passwords[1]}`, `999993,not-an-email,${passwords[2]}`].join('\n'),
    );
    const status = await importAndFinish(pipeline, file);
    expect(status.counts).toMatchObject({ failed: 2, invalid: 1 });
    const request = await until(async () => receiver?.received[0], 'the notification');
    const body = BodySchema.parse(JSON.parse(request.body));
    expect(body.failures?.length).toBe(2);
    for (const password of passwords) expect(request.body).not.toContain(password);
  });

  it('retries a delivery the receiver answered 500, with the same id, body and a valid signature', { timeout: 60_000 }, async () => {
    receiver = await startReceiver([500, 503]);
    pipeline = await startPipeline({ config: { webhookUrl: receiver.url, webhookSecret: SECRET } });
    // The runtime's notifier waits seconds between attempts; this one, on the same queue, milliseconds.
    const notifier = createNotifier({ control: pipeline.runtime.queues.control, enabled: true, logger: silent, policy: { backoffMs: 20 } });
    const id = await notifier.notify({ event: 'export.failed', exportId: 'export-20261124T020000Z-abc123', error: 'card 4111 1111 1111 1111 was refused (INVALID 400)' });
    expect(id).toBe('export.failed-export-20261124T020000Z-abc123');

    await until(async () => (receiver && receiver.received.length >= 3 ? true : undefined), 'three attempts');
    const [first, second, third] = receiver.received;
    expect(first?.body).toBe(third?.body);
    expect(second?.body).toBe(third?.body);
    for (const request of receiver.received) {
      expect(signatureVerifies(request, SECRET)).toBe(true);
      expect(request.headers['x-subsync-delivery']).toBe(id);
    }
    const body = BodySchema.parse(JSON.parse(third?.body ?? '{}'));
    expect(body).toMatchObject({ id, event: 'export.failed', export: 'export-20261124T020000Z-abc123', links: {} });
    expect(body.error).toBe('card ************1111 was refused (INVALID 400)');
    expect(third?.body).not.toContain('4111 1111 1111 1111');
    // Delivered: the job completed, and is not tried again.
    // Its state first, then the job: a job read before it completed, found completed after, holds the
    // attempts counted before its last one.
    const job = await until(async () => {
      const control = pipeline?.runtime.queues.control;
      return (await control?.getJobState(`notify-${id}`)) === 'completed' ? control?.getJob(`notify-${id}`) : undefined;
    }, 'the delivery job to complete');
    expect(job.attemptsMade).toBe(3);
    expect(receiver.received.length).toBe(3);
  });

  it('raising the same event twice queues one delivery (at least once, deduplicated by id)', async () => {
    pipeline = await startPipeline({ workers: false, config: { webhookUrl: 'http://127.0.0.1:9/hook' } });
    const notifier = pipeline.runtime.notifier;
    expect(notifier.enabled).toBe(true);
    const a = await notifier.notify({ event: 'import.finished', importId: 'abc123', round: 2 });
    const b = await notifier.notify({ event: 'import.finished', importId: 'abc123', round: 2 });
    const c = await notifier.notify({ event: 'import.finished', importId: 'abc123', round: 3 });
    expect(a).toBe(b);
    expect(c).not.toBe(a);
    const jobs = await pipeline.runtime.queues.control.getJobs(['waiting']);
    expect(jobs.filter((j) => j.name === NOTIFY_JOB).map((j) => j.id).sort()).toEqual([`notify-${a}`, `notify-${c}`].sort());
  });

  it('without SUBSYNC_WEBHOOK_URL queues nothing', async () => {
    pipeline = await startPipeline({ workers: false });
    expect(pipeline.runtime.notifier.enabled).toBe(false);
    expect(await pipeline.runtime.notifier.notify({ event: 'import.paused', importId: 'abc' })).toBeUndefined();
    expect(await pipeline.runtime.queues.control.getJobCounts('waiting', 'delayed')).toEqual({ waiting: 0, delayed: 0 });
  });

  it('an import finishes while the receiver is down; its notification waits in the queue, retried', { timeout: 60_000 }, async () => {
    const down = await startReceiver();
    const url = down.url;
    await down.close();
    pipeline = await startPipeline({ config: { webhookUrl: url, webhookSecret: SECRET } });
    const status = await importAndFinish(pipeline, await pipeline.file('customers.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n'));
    expect(status.finished).toBe(true);
    const id = eventIdOf({ event: 'import.finished', importId: status.importId, round: 0 });
    const job = await until(async () => {
      const found = await pipeline?.runtime.queues.control.getJob(`notify-${id}`);
      return found && found.attemptsMade >= 1 ? found : undefined;
    }, 'a failed delivery attempt');
    expect(await job.getState()).toBe('delayed');
    expect(job.failedReason).toContain('did not answer');
  });

  it('an export that finishes is told, with its count and file', { timeout: 60_000 }, async () => {
    receiver = await startReceiver();
    pipeline = await startPipeline({ config: { webhookUrl: receiver.url, webhookSecret: SECRET, dashboardUrl: DASHBOARD } });
    const exportId = await enqueueExport(pipeline.runtime.queues.control, { format: 'csv', gzip: false });
    const request = await until(async () => receiver?.received[0], 'the export notification');
    expect(signatureVerifies(request, SECRET)).toBe(true);
    const body = BodySchema.parse(JSON.parse(request.body));
    expect(body).toMatchObject({ id: `export.finished-${exportId}`, event: 'export.finished', export: exportId, complete: true, links: { exports: `${DASHBOARD}/exports` } });
    expect(body.counts?.customers).toBe(pipeline.sandbox.store.customerCount());
    expect(body.file).toMatch(/\.csv$/);
  });

  it('a 4xx other than 408 and 429 is not retried: retrying would not change it', async () => {
    receiver = await startReceiver([404]);
    await expect(postNotification({ url: receiver.url, secret: SECRET }, 'x-1', 'import.paused', '{"id":"x-1"}', silent)).rejects.toThrow(/answered 404, which retrying would not change/);
    const next = await startReceiver([429]);
    try {
      await expect(postNotification({ url: next.url }, 'x-2', 'import.paused', '{"id":"x-2"}', silent)).rejects.toThrow(/answered 429$/);
      // Without a secret, no signature header.
      expect(next.received[0]?.headers['x-subsync-signature']).toBeUndefined();
    } finally {
      await next.close();
    }
  });

  it('reads an answer by the delivery policy: 2xx delivered, 5xx and "later" statuses retried, anything else refused', () => {
    expect([200, 204, 299].map((s) => webhookAnswer(s))).toEqual(['delivered', 'delivered', 'delivered']);
    expect([500, 503, 599, 408, 425, 429].map((s) => webhookAnswer(s))).toEqual(Array(6).fill('retry'));
    expect([301, 302, 400, 401, 404, 410, 422].map((s) => webhookAnswer(s))).toEqual(Array(7).fill('refused'));
  });
});
