/**
 * The audit trail: who did what to which import or setting, and when, from
 * the dashboard or the command line.
 *
 * Glossary:
 * - **actor**: who acted. `dashboard:<token name>` for a dashboard user
 *   (SUBSYNC_DASHBOARD_TOKENS names each token; the single
 *   SUBSYNC_DASHBOARD_TOKEN is `dashboard:admin`, a dashboard without a
 *   token is `dashboard:anonymous`), `cli:<os user>` for a command (or
 *   SUBSYNC_ACTOR when set).
 * - **action**: a stable dotted name ({@link AUDIT_ACTIONS}), e.g.
 *   `retry`, `retry.group`, `edit`, `schedule.set`.
 * - **target**: what it acted on: an import id, `import/row`, a schedule id.
 * - **details**: what the action said and did, as data (rows retried, an
 *   edit's before and after).
 *
 * Storage: each entry is its own key, `<prefix>:audit:entry:<id>`, set to
 * expire after SUBSYNC_RETENTION_DAYS (Redis removes it on time, whether any
 * subsync process runs or not), and its id is in the sorted set
 * `<prefix>:audit` by time, which holds ids only and is trimmed of expired
 * ids on every write and read. At most {@link AUDIT_MAX_ENTRIES} are kept:
 * the oldest go first.
 *
 * No card data, CVC or password is ever stored: every text of an entry goes
 * through the secrets scrub (src/secrets.ts), the secrets the caller knows
 * (`known`) included, and a detail whose key names a card number, CVC or
 * password keeps only whether it was given.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { RedisClient } from '../redis/redis.js';
import { PASSWORD_MASK, scrubSecrets, type KnownSecrets } from '../secrets.js';

/** Entries kept at most, whatever their age: the oldest are dropped first. */
export const AUDIT_MAX_ENTRIES = 100_000;

/** The actions subsync records; other modules may add theirs (a stable dotted name). */
export const AUDIT_ACTIONS = {
  retry: 'retry',
  retryGroup: 'retry.group',
  edit: 'edit',
  scheduleSet: 'schedule.set',
  scheduleRemove: 'schedule.remove',
  cancel: 'cancel',
  pause: 'pause',
  resume: 'resume',
} as const;

export const AuditEntrySchema = z.object({
  id: z.string(),
  actor: z.string(),
  /** The actor's role when it acted from the dashboard. */
  role: z.string().optional(),
  action: z.string(),
  target: z.string(),
  /** ISO 8601, UTC. */
  at: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type AuditEntry = z.infer<typeof AuditEntrySchema>;

/** What a caller records; the id and time are added. */
export interface AuditInput {
  actor: string;
  role?: string;
  action: string;
  target: string;
  details?: Record<string, unknown>;
  /** Secrets the caller holds (a card number typed into an edit, a password): scrubbed from every text of the entry. */
  known?: KnownSecrets;
}

/** Where the trail lives and how long it keeps entries (a Config has both). */
export interface AuditSettings {
  queuePrefix: string;
  retentionDays: number;
  /** Entries kept at most; default {@link AUDIT_MAX_ENTRIES}. */
  auditMaxEntries?: number;
}

export const auditKeys = (prefix: string) => ({
  /** Sorted set: entry id by time (ms). */
  index: `${prefix}:audit`,
  /** String: one entry (JSON), expiring after the retention. */
  entry: (id: string) => `${prefix}:audit:entry:${id}`,
});

/** Keys of details that hold a secret: only whether one was given is kept. */
const SECRET_KEY = /(accountnumber|card.?number|cvc|cvcode|cvv|password|secret|token)/i;

/**
 * Details made safe to keep: texts scrubbed (card-number-shaped runs and the
 * known secrets), values under a secret's key reduced to whether they were
 * given, nesting kept (arrays and plain objects).
 */
export function safeDetails(value: unknown, known: KnownSecrets = [], key = ''): unknown {
  if (key !== '' && SECRET_KEY.test(key)) {
    return typeof value === 'boolean' ? value : value === undefined || value === null || value === '' ? 'none' : PASSWORD_MASK;
  }
  if (typeof value === 'string') return scrubSecrets(value, known);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return value;
  if (Array.isArray(value)) return value.map((item) => safeDetails(item, known));
  if (typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[scrubSecrets(k, known)] = safeDetails(v, known, k);
    return out;
  }
  return undefined;
}

const retentionMs = (settings: AuditSettings): number => settings.retentionDays * 24 * 3600 * 1000;

/**
 * Keeps one entry; returns it as stored. Also drops from the index what has
 * expired and what exceeds {@link AUDIT_MAX_ENTRIES}.
 */
export async function recordAudit(redis: RedisClient, settings: AuditSettings, input: AuditInput, now = Date.now()): Promise<AuditEntry> {
  const keys = auditKeys(settings.queuePrefix);
  const id = `${now.toString(36).padStart(9, '0')}-${randomBytes(4).toString('hex')}`;
  const known = input.known ?? [];
  const entry: AuditEntry = AuditEntrySchema.parse({
    id,
    actor: scrubSecrets(input.actor, known),
    ...(input.role === undefined ? {} : { role: input.role }),
    action: input.action,
    target: scrubSecrets(input.target, known),
    at: new Date(now).toISOString(),
    ...(input.details === undefined ? {} : { details: safeDetails(input.details, known) }),
  });
  await redis
    .multi()
    .set(keys.entry(id), JSON.stringify(entry), 'PX', retentionMs(settings))
    .zadd(keys.index, now, id)
    .exec();
  await trimAudit(redis, settings, now);
  return entry;
}

/** Drops expired ids from the index, and the oldest entries past {@link AUDIT_MAX_ENTRIES}. */
export async function trimAudit(redis: RedisClient, settings: AuditSettings, now = Date.now()): Promise<void> {
  const keys = auditKeys(settings.queuePrefix);
  await redis.zremrangebyscore(keys.index, '-inf', `(${now - retentionMs(settings)}`);
  const excess = (await redis.zcard(keys.index)) - (settings.auditMaxEntries ?? AUDIT_MAX_ENTRIES);
  if (excess <= 0) return;
  const oldest = await redis.zrange(keys.index, 0, excess - 1);
  if (oldest.length === 0) return;
  await redis.multi().del(...oldest.map(keys.entry)).zrem(keys.index, ...oldest).exec();
}

export interface AuditPage {
  entries: AuditEntry[];
  /** Entries in the trail (within retention). */
  total: number;
  /** How long each entry is kept (SUBSYNC_RETENTION_DAYS). */
  retentionDays: number;
}

/** The newest entries first, `limit` of them after skipping `offset`. */
export async function listAudit(redis: RedisClient, settings: AuditSettings, options: { limit: number; offset?: number }, now = Date.now()): Promise<AuditPage> {
  const keys = auditKeys(settings.queuePrefix);
  await trimAudit(redis, settings, now);
  const offset = Math.max(0, options.offset ?? 0);
  const limit = Math.max(0, options.limit);
  const [ids, total] = await Promise.all([limit === 0 ? Promise.resolve([]) : redis.zrevrange(keys.index, offset, offset + limit - 1), redis.zcard(keys.index)]);
  const texts = ids.length === 0 ? [] : await redis.mget(...ids.map(keys.entry));
  const entries: AuditEntry[] = [];
  for (const text of texts) {
    // An entry expired between the two reads is simply gone.
    if (text === null) continue;
    const parsed = AuditEntrySchema.safeParse(parseJson(text));
    if (parsed.success) entries.push(parsed.data);
  }
  return { entries, total, retentionDays: settings.retentionDays };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** When an entry leaves the trail. */
export function expiresAt(entry: Pick<AuditEntry, 'at'>, settings: Pick<AuditSettings, 'retentionDays'>): string {
  return new Date(Date.parse(entry.at) + settings.retentionDays * 24 * 3600 * 1000).toISOString();
}
