/** The audit trail on real Redis, each test under its own prefix. */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { auditKeys, listAudit, recordAudit, safeDetails, type AuditSettings } from '../../src/audit/trail.js';
import { cliActor } from '../../src/audit/actor.js';
import { PASSWORD_MASK } from '../../src/secrets.js';
import { deleteKeys, REDIS_URL, redisText } from '../support/pipeline.js';

const redis = new Redis(REDIS_URL);
const prefixes: string[] = [];
afterEach(async () => {
  for (const prefix of prefixes.splice(0)) await deleteKeys(prefix);
});
afterAll(() => redis.quit());

function settings(extra: Partial<AuditSettings> = {}): AuditSettings {
  const queuePrefix = `subsync-test-audit-${randomUUID().slice(0, 8)}`;
  prefixes.push(queuePrefix);
  return { queuePrefix, retentionDays: 30, ...extra };
}

const DAY = 24 * 3600 * 1000;

describe('audit trail', () => {
  it('lists entries newest first, a page at a time, with the total', async () => {
    const s = settings();
    const now = Date.now();
    for (let i = 0; i < 7; i++) await recordAudit(redis, s, { actor: `cli:user${i}`, action: 'retry', target: `import-${i}`, details: { retried: [i] } }, now - (7 - i) * 1000);
    const first = await listAudit(redis, s, { limit: 3 }, now);
    expect(first.total).toBe(7);
    expect(first.entries.map((e) => e.target)).toEqual(['import-6', 'import-5', 'import-4']);
    const last = await listAudit(redis, s, { limit: 3, offset: 6 }, now);
    expect(last.entries.map((e) => e.actor)).toEqual(['cli:user0']);
    expect(last.entries[0]).toMatchObject({ action: 'retry', details: { retried: [0] }, at: new Date(now - 7000).toISOString() });
  });

  it('keeps each entry SUBSYNC_RETENTION_DAYS: its key expires then, and an older one leaves the list', async () => {
    const s = settings({ retentionDays: 2 });
    const now = Date.now();
    const old = await recordAudit(redis, s, { actor: 'cli:a', action: 'retry', target: 'old' }, now - 3 * DAY);
    const fresh = await recordAudit(redis, s, { actor: 'cli:a', action: 'retry', target: 'fresh' }, now);
    const ttl = await redis.pttl(auditKeys(s.queuePrefix).entry(fresh.id));
    expect(ttl).toBeGreaterThan(DAY);
    expect(ttl).toBeLessThanOrEqual(2 * DAY);
    const page = await listAudit(redis, s, { limit: 10 }, now);
    expect(page.entries.map((e) => e.target)).toEqual(['fresh']);
    expect(page.retentionDays).toBe(2);
    // Trimmed from the index too, not only hidden.
    expect(await redis.zscore(auditKeys(s.queuePrefix).index, old.id)).toBeNull();
  });

  it('is bounded: past the most entries kept, the oldest go, keys and all', async () => {
    const s = settings({ auditMaxEntries: 3 });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await recordAudit(redis, s, { actor: 'cli:a', action: 'retry', target: `t${i}` }, Date.now() + i)).id);
    const page = await listAudit(redis, s, { limit: 10 });
    expect(page.total).toBe(3);
    expect(page.entries.map((e) => e.target)).toEqual(['t4', 't3', 't2']);
    expect(await redis.exists(auditKeys(s.queuePrefix).entry(ids[0] ?? ''))).toBe(0);
  });

  it('never keeps a card number, CVC or password: scrubbed texts, secret keys reduced, the caller\'s known secrets removed', async () => {
    const s = settings();
    const entry = await recordAudit(redis, s, {
      actor: 'dashboard:alice',
      role: 'operator',
      action: 'edit',
      target: 'abc/3',
      details: {
        changes: { 'Customer.City': { before: 'Leeds', after: 'card 4111-1111-1111-1111 cvc 737 pw Tr0ub4dor&3x' } },
        cardNumber: '5555555555554444',
        Password: 'Tr0ub4dor&3x',
        cvcEntered: true,
      },
      known: ['5555555555554444', '737', 'Tr0ub4dor&3x'],
    });
    expect(entry.details).toEqual({
      changes: { 'Customer.City': { before: 'Leeds', after: `card ************1111 cvc *** pw ${PASSWORD_MASK}` } },
      cardNumber: PASSWORD_MASK,
      Password: PASSWORD_MASK,
      cvcEntered: true,
    });
    const stored = await redisText(redis, s.queuePrefix);
    expect(stored).toContain('dashboard:alice');
    for (const secret of ['4111-1111-1111-1111', '4111111111111111', '5555555555554444', 'Tr0ub4dor&3x', 'cvc 737']) expect(stored).not.toContain(secret);
  });

  it('safeDetails keeps numbers, booleans and nesting, and says "none" for a secret not given', () => {
    expect(safeDetails({ rows: [1, 2], ok: true, nested: { password: '' }, n: null })).toEqual({ rows: [1, 2], ok: true, nested: { password: 'none' }, n: null });
  });

  it('a command is cli:<user>, or SUBSYNC_ACTOR', () => {
    expect(cliActor({ actor: 'ci:nightly' })).toBe('ci:nightly');
    expect(cliActor({})).toMatch(/^cli:.+/);
  });
});
