/**
 * Raising and delivering notifications (src/notify/events.ts).
 *
 * `notify(event)` only queues a job on the control queue (jobId = the event
 * id, so raising it twice queues it once): nothing of the delivery is in the
 * path of the import or export that raised it. A control worker runs the job:
 * it builds the body once (the import's file, counts and largest failure
 * groups, read then; scrubbed of card data), keeps it in the job, signs it
 * and POSTs it. A failed POST is retried with exponential backoff
 * ({@link WEBHOOK_DELIVERY}); an answer that retrying cannot change (a 4xx
 * other than 408, 425 and 429, a redirect) ends it, logged.
 */
import { UnrecoverableError, type Job, type Queue } from 'bullmq';
import type { Logger } from 'pino';
import { fetch } from 'undici';
import { z } from 'zod';
import { ROW_STATUSES } from '../outcomes.js';
import type { ImportStore } from '../store/importStore.js';
import { SubsyncError } from '../errors.js';
import { WEBHOOK_DELIVERY, webhookAnswer } from '../policy.js';
import { scrubSecrets } from '../secrets.js';
import { eventIdOf, isExportEvent, NotifyEventSchema, signatureOf, type NotificationBody, type NotifyEvent } from './events.js';

/** The control job that delivers one notification. */
export const NOTIFY_JOB = 'notify.webhook';

/** How a notification is delivered (defaults: src/policy.ts WEBHOOK_DELIVERY); tests shorten the backoff. */
export interface DeliveryPolicy {
  /** Attempts in all, the first included. */
  attempts: number;
  /** The first retry's wait; each next one doubles (BullMQ exponential backoff). */
  backoffMs: number;
  /** Time for the receiver to answer. */
  timeoutMs: number;
  /** Statuses worth another attempt besides 5xx: the receiver may take it later. */
  retryStatuses: readonly number[];
}

/** Largest failure groups named in an import's notification. */
const FAILURE_GROUPS_SENT = 5;
/** Delivered notifications are kept this long (a raise again within it is not sent twice). */
const KEEP_SECONDS = 7 * 24 * 3600;

export const NotifyJobDataSchema = z.object({
  id: z.string(),
  at: z.string(),
  event: NotifyEventSchema,
  /** The body as first built, sent unchanged by every later attempt. */
  body: z.string().optional(),
});
export type NotifyJobData = z.infer<typeof NotifyJobDataSchema>;

/** What `notify` is: a queue write, or nothing when no webhook is configured. */
export interface Notifier {
  /** Whether SUBSYNC_WEBHOOK_URL is set: events are queued. */
  readonly enabled: boolean;
  /** Queues the event's delivery; returns its id (undefined when disabled). Never throws: a lost notification is logged, the caller goes on. */
  notify(event: NotifyEvent): Promise<string | undefined>;
}

export function createNotifier(input: { control: Queue; enabled: boolean; logger: Logger; policy?: Partial<DeliveryPolicy> }): Notifier {
  const policy = { ...WEBHOOK_DELIVERY, ...input.policy };
  return {
    enabled: input.enabled,
    async notify(event) {
      if (!input.enabled) return undefined;
      const now = Date.now();
      const id = eventIdOf(event, now);
      try {
        const data: NotifyJobData = { id, at: new Date(now).toISOString(), event: NotifyEventSchema.parse(event) };
        await input.control.add(NOTIFY_JOB, data, {
          // BullMQ refuses ':' in ids; event ids have none.
          jobId: `notify-${id}`,
          attempts: policy.attempts,
          backoff: { type: 'exponential', delay: policy.backoffMs },
          removeOnComplete: { age: KEEP_SECONDS },
          removeOnFail: { age: KEEP_SECONDS },
        });
        return id;
      } catch (error) {
        input.logger.warn({ err: error, event: event.event, id }, 'notification not queued');
        return undefined;
      }
    },
  };
}

/** A delivery that did not go through: the job is retried (a refusal retrying cannot change is an UnrecoverableError instead). */
export class WebhookError extends SubsyncError {
  readonly code: 'WEBHOOK_UNANSWERED' | 'WEBHOOK_REFUSED';
  /** The status answered, for WEBHOOK_REFUSED. */
  readonly status: number | undefined;

  constructor(code: 'WEBHOOK_UNANSWERED' | 'WEBHOOK_REFUSED', message: string, status?: number) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** Where notifications go (SUBSYNC_WEBHOOK_URL, SUBSYNC_WEBHOOK_SECRET) and what their links point at. */
export interface WebhookTarget {
  url: string;
  secret?: string;
  /** SUBSYNC_DASHBOARD_URL: links in the body; none without it. */
  dashboardUrl?: string;
  policy?: Partial<DeliveryPolicy>;
}

/** A failure group as an import's notification names it. */
export interface FailureGroup {
  code: string;
  reason: string;
  count: number;
}

/** What the delivery job reads. */
export interface DeliveryDeps {
  store: ImportStore;
  logger: Logger;
  webhook?: WebhookTarget;
  /** An import's failure groups, largest first (src/import/errorGroups.ts, handed in by the worker that delivers). */
  failureGroups?: (importId: string) => Promise<FailureGroup[]>;
}

/** The control handler of {@link NOTIFY_JOB}. */
export async function deliverNotification(job: Job, deps: DeliveryDeps): Promise<string> {
  const parsed = NotifyJobDataSchema.safeParse(job.data);
  if (!parsed.success) throw new UnrecoverableError(`notification job ${job.id ?? '?'} has unreadable data`);
  const data = parsed.data;
  if (!deps.webhook) throw new UnrecoverableError(`notification ${data.id}: this worker has no SUBSYNC_WEBHOOK_URL`);
  let body = data.body;
  if (body === undefined) {
    body = JSON.stringify(await buildBody(data, deps.store, deps.webhook.dashboardUrl, deps.failureGroups));
    // Kept in the job: a retry sends the same bytes, with the same signature.
    await job.updateData({ ...data, body });
  }
  return postNotification(deps.webhook, data.id, data.event.event, body, deps.logger);
}

/** POSTs one body; throws to be retried, or UnrecoverableError when retrying cannot help. */
export async function postNotification(target: WebhookTarget, id: string, event: string, body: string, logger: Logger): Promise<string> {
  const policy = { ...WEBHOOK_DELIVERY, ...target.policy };
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': 'subsync-webhook',
    'x-subsync-event': event,
    'x-subsync-delivery': id,
  };
  if (target.secret !== undefined) headers['x-subsync-signature'] = signatureOf(target.secret, body);
  let status: number;
  try {
    // No redirect is followed: the body goes to the configured address only.
    const response = await fetch(target.url, { method: 'POST', headers, body, redirect: 'manual', signal: AbortSignal.timeout(policy.timeoutMs) });
    status = response.status;
    await response.body?.cancel().catch(() => undefined);
  } catch (error) {
    // The URL may hold a credential (a Slack hook's path): only its origin is logged.
    logger.warn({ id, event, to: originOf(target.url), err: error }, 'notification not delivered; it is retried');
    throw new WebhookError('WEBHOOK_UNANSWERED', `notification ${id}: the webhook did not answer`);
  }
  const answer = webhookAnswer(status, policy.retryStatuses);
  if (answer === 'delivered') {
    logger.info({ id, event, to: originOf(target.url), status }, 'notification delivered');
    return `delivered ${status}`;
  }
  if (answer === 'retry') {
    logger.warn({ id, event, to: originOf(target.url), status }, 'notification refused for now; it is retried');
    throw new WebhookError('WEBHOOK_REFUSED', `notification ${id}: the webhook answered ${status}`, status);
  }
  logger.error({ id, event, to: originOf(target.url), status }, 'notification refused; not retried');
  throw new UnrecoverableError(`notification ${id}: the webhook answered ${status}, which retrying would not change`);
}

const originOf = (url: string): string => {
  try {
    return new URL(url).origin;
  } catch {
    return '(unreadable URL)';
  }
};

/** Text for a Slack message: its control characters escaped (Slack reads `<…>` as a link). */
const slack = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * The body of a notification: its facts read now. Every text that may come
 * from outside (a file name, an API's words, a reason, an error) is scrubbed
 * of card data (src/secrets.ts) before it goes into a field or the `text`.
 * Ids and links are subsync's own (hex digests, time stamps), never scrubbed:
 * the digit-run rule would mangle a 13-digit time in an export id, and a
 * receiver dedupes and links on them.
 */
export async function buildBody(
  data: NotifyJobData,
  store: ImportStore,
  dashboardUrl: string | undefined,
  failureGroups: (importId: string) => Promise<FailureGroup[]> = async () => [],
): Promise<NotificationBody> {
  const { event } = data;
  const base = { id: data.id, event: event.event, at: data.at };
  const clean = (text: string | undefined): string | undefined => (text === undefined ? undefined : scrubSecrets(text));
  if (isExportEvent(event)) {
    const links: Record<string, string> = dashboardUrl ? { exports: `${dashboardUrl}/exports` } : {};
    const file = clean(event.file);
    const error = clean(event.error);
    const what = event.event === 'export.finished'
      ? `${event.count ?? 0} customers in ${file ?? 'its file'}${event.complete === false ? ' (NOT proven complete: see its manifest)' : ''}`
      : `failed: ${error ?? 'see the worker log'}`;
    return {
      ...base,
      export: event.exportId,
      ...(file === undefined ? {} : { file }),
      ...(event.count === undefined ? {} : { counts: { customers: event.count } }),
      ...(event.complete === undefined ? {} : { complete: event.complete }),
      ...(error === undefined ? {} : { error }),
      links,
      text: `subsync: export ${slack(event.exportId)} ${event.event === 'export.finished' ? 'finished: ' : ''}${slack(what)}${links.exports ? ` <${links.exports}|Exports>` : ''}`,
    };
  }

  const [record, counts] = await Promise.all([store.getImport(event.importId), store.counts(event.importId)]);
  const byStatus = Object.fromEntries(ROW_STATUSES.filter((s) => counts.byStatus[s] > 0).map((s) => [s, counts.byStatus[s]]));
  const problems = ['invalid', 'failed', 'needs-review'].reduce((n, s) => n + (byStatus[s] ?? 0), 0);
  const groups = problems > 0 && record ? (await failureGroups(event.importId)).slice(0, FAILURE_GROUPS_SENT) : [];
  const state = event.event === 'import.finished' ? (problems > 0 ? 'finished with failures' : 'finished') : event.event === 'import.paused' ? 'paused' : 'cancelled';
  const links: Record<string, string> = dashboardUrl ? { import: `${dashboardUrl}/imports/${encodeURIComponent(event.importId)}` } : {};
  const file = clean(record?.file);
  const reason = clean(event.reason);
  const actor = clean(event.actor);
  const figures = Object.entries(byStatus).map(([s, n]) => `${n} ${s}`).join(', ') || 'no rows settled';
  return {
    ...base,
    importId: event.importId,
    ...(file === undefined ? {} : { file }),
    ...(record ? { kind: record.kind } : {}),
    state,
    counts: { ...byStatus, settled: counts.settled, ...(record?.total === undefined ? {} : { total: record.total }) },
    // Reasons are scrubbed with each row's own secrets where they are stored; again here for a ledger written before that.
    failures: groups.map((g) => ({ code: g.code, reason: scrubSecrets(g.reason), count: g.count })),
    ...(reason === undefined ? {} : { reason }),
    ...(actor === undefined ? {} : { actor }),
    links,
    text: `subsync: import ${slack(event.importId)}${file === undefined ? '' : ` (${slack(file)})`} ${state}${reason === undefined ? '' : `: ${slack(reason)}`}: ${figures}${links.import ? ` <${links.import}|Open>` : ''}`,
  };
}
