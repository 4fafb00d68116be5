/**
 * Lifecycle notifications: what subsync tells a webhook (SUBSYNC_WEBHOOK_URL)
 * about imports and exports.
 *
 * Glossary:
 * - **event**: one of {@link NOTIFY_EVENTS}, e.g. `import.finished`.
 * - **event id**: stable for one happening (`import.finished-<import>-<round>`,
 *   `export.finished-<export>`), so a delivery retried, or an event raised
 *   twice by a job that ran again, reaches the receiver with the same `id`:
 *   delivery is at least once, and receivers dedupe on `id`.
 * - **body**: the JSON POSTed, built once when first delivered and then sent
 *   byte for byte on every retry; its `text` reads as a Slack incoming-webhook
 *   message.
 * - **signature**: `X-Subsync-Signature: sha256=<hex HMAC-SHA256 of the raw
 *   body with SUBSYNC_WEBHOOK_SECRET>`.
 */
import { createHmac } from 'node:crypto';
import { z } from 'zod';

export const NOTIFY_EVENTS = ['import.finished', 'import.paused', 'import.cancelled', 'export.finished', 'export.failed'] as const;
export type NotifyEventName = (typeof NOTIFY_EVENTS)[number];

/** An event about an import: its figures are read from Redis when it is delivered. */
export const ImportEventSchema = z.object({
  event: z.enum(['import.finished', 'import.paused', 'import.cancelled']),
  importId: z.string().min(1),
  /** Why it was paused or cancelled (a canary's failures, an operator). */
  reason: z.string().optional(),
  /** Who paused or cancelled it (an audit actor). */
  actor: z.string().optional(),
  /** The finalize round (import.finished): one event per round that finishes. */
  round: z.number().int().optional(),
});

/** An event about an export, with its figures. */
export const ExportEventSchema = z.object({
  event: z.enum(['export.finished', 'export.failed']),
  exportId: z.string().min(1),
  /** The file's name (not its folder). */
  file: z.string().optional(),
  count: z.number().int().optional(),
  complete: z.boolean().optional(),
  error: z.string().optional(),
});

export const NotifyEventSchema = z.union([ImportEventSchema, ExportEventSchema]);
export type ImportEvent = z.infer<typeof ImportEventSchema>;
export type ExportEvent = z.infer<typeof ExportEventSchema>;
/** What a caller passes to `notify`. */
export type NotifyEvent = ImportEvent | ExportEvent;

export const isExportEvent = (event: NotifyEvent): event is ExportEvent => 'exportId' in event;

/** The id receivers dedupe on: one per happening, the same however often it is raised or delivered. */
export function eventIdOf(event: NotifyEvent, now = Date.now()): string {
  if (isExportEvent(event)) return `${event.event}-${event.exportId}`;
  if (event.event === 'import.finished') return `import.finished-${event.importId}-${event.round ?? 0}`;
  // A pause or a cancel may happen again later: each is its own happening.
  return `${event.event}-${event.importId}-${now.toString(36)}`;
}

/** The body's fields besides `id`, `event`, `at` and `text` (src/notify/body.ts fills them). */
export interface NotificationBody {
  id: string;
  event: NotifyEventName;
  at: string;
  importId?: string;
  export?: string;
  file?: string;
  kind?: string;
  state?: string;
  counts?: Record<string, number>;
  failures?: Array<{ code: string; reason: string; count: number }>;
  reason?: string;
  actor?: string;
  complete?: boolean;
  error?: string;
  links: Record<string, string>;
  /** A line a person reads: Slack shows it as the message. */
  text: string;
}

/** The header value signing `body` with `secret`. */
export function signatureOf(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body, 'utf8').digest('hex')}`;
}
