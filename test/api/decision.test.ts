import { describe, expect, it } from 'vitest';
import { decide, failureKind, provenNotApplied } from '../../src/api/decision.js';
import { ApiError } from '../../src/api/errors.js';
import { fullJitterBackoff } from '../../src/backoff.js';

const answer = (method: string, status: number, retryAfter?: string, apiMessage?: string): ApiError =>
  ApiError.fromResponse({ endpoint: method === 'GET' ? 'searchCustomers' : 'createCustomer', method, status, apiMessage, retryAfter, now: 0 });
const network = (method: string, code: string): ApiError =>
  ApiError.fromNetworkError({ endpoint: method === 'GET' ? 'searchCustomers' : 'createCustomer', method, error: Object.assign(new Error(`socket ${code}`), { code }) });

const bounds = { baseMs: 100, capMs: 10_000 };
const half = (): number => 0.5;

describe('failureKind', () => {
  it('reads the kind from the error alone', () => {
    expect(failureKind(answer('POST', 429))).toBe('rate-limited');
    expect(failureKind(answer('POST', 400, undefined, 'EmailAddress is not valid'))).toBe('permanent');
    expect(failureKind(answer('GET', 404))).toBe('permanent');
    expect(failureKind(answer('POST', 500))).toBe('may-have-applied');
    expect(failureKind(answer('GET', 503))).toBe('transient');
    expect(failureKind(answer('POST', 408))).toBe('transient');
    expect(failureKind(network('POST', 'UND_ERR_HEADERS_TIMEOUT'))).toBe('timeout');
    expect(failureKind(network('POST', 'ECONNRESET'))).toBe('may-have-applied');
    expect(failureKind(network('POST', 'ECONNREFUSED'))).toBe('transient');
    // Not the API's: a Redis hiccup, another row creating the same person. The one default.
    expect(failureKind(new Error('Connection is closed.'))).toBe('transient');
    expect(failureKind('a thrown string')).toBe('transient');
  });

  it('only an API error that cannot have been applied puts a sent row back to pending', () => {
    expect(provenNotApplied(answer('POST', 429))).toBe(true);
    expect(provenNotApplied(answer('POST', 400))).toBe(true);
    expect(provenNotApplied(answer('POST', 502))).toBe(false);
    expect(provenNotApplied(network('POST', 'ECONNREFUSED'))).toBe(true);
    expect(provenNotApplied(network('POST', 'ECONNRESET'))).toBe(false);
    expect(provenNotApplied(new Error('Connection is closed.'))).toBe(false);
  });
});

describe('decide', () => {
  it('a 429 waits for the budget whatever the attempt, its Retry-After passed on', () => {
    expect(decide(answer('POST', 429, '2'), { attempt: 1, maxAttempts: 3 })).toEqual({ kind: 'wait-for-budget', retryAfterMs: 2000 });
    expect(decide(answer('POST', 429), { attempt: 3, maxAttempts: 3, mayHaveApplied: true, canReadBack: true })).toEqual({ kind: 'wait-for-budget', retryAfterMs: undefined });
  });

  it('retries what is worth it while attempts are left, after the backoff of that attempt and never before a Retry-After', () => {
    expect(decide(answer('GET', 503), { attempt: 2, maxAttempts: 3, backoff: bounds, random: half })).toEqual({ kind: 'retry', delayMs: fullJitterBackoff(2, undefined, bounds, half) });
    expect(decide(answer('POST', 500), { attempt: 1, maxAttempts: 3, mayHaveApplied: true, canReadBack: true, backoff: bounds, random: half })).toMatchObject({ kind: 'retry' });
    expect(decide(new Error('Connection is closed.'), { attempt: 1, maxAttempts: 2, backoff: bounds, random: half })).toMatchObject({ kind: 'retry' });
    expect(decide(answer('GET', 503, '30'), { attempt: 1, maxAttempts: 3, backoff: bounds, random: half })).toEqual({ kind: 'retry', delayMs: 30_000 });
  });

  it('a permanent refusal settles failed at once, in the API\'s words', () => {
    expect(decide(answer('POST', 400, undefined, 'EmailAddress is not valid'), { attempt: 1, maxAttempts: 8 })).toEqual({
      kind: 'settle',
      status: 'failed',
      note: 'EmailAddress is not valid (API_REFUSED 400)',
    });
  });

  it('with no attempt left: failed when nothing may have applied, read back when it may, needs review when nothing can tell', () => {
    const last = { attempt: 3, maxAttempts: 3 };
    expect(decide(answer('GET', 503), last)).toEqual({ kind: 'settle', status: 'failed', note: 'retries ran out: searchCustomers failed with 503' });
    expect(decide(new Error('Connection is closed.'), last)).toEqual({ kind: 'settle', status: 'failed', note: 'retries ran out: Connection is closed.' });
    expect(decide(answer('POST', 500), { ...last, mayHaveApplied: true, canReadBack: true })).toEqual({ kind: 'read-back', reason: 'createCustomer failed with 500' });
    expect(decide(answer('POST', 500), { ...last, mayHaveApplied: true, canReadBack: false })).toEqual({
      kind: 'needs-review',
      note: 'retries ran out and the last attempt may have been applied: createCustomer failed with 500',
    });
    // A timeout: the service may still be applying it, so reading back now proves nothing.
    expect(decide(network('POST', 'UND_ERR_HEADERS_TIMEOUT'), { ...last, mayHaveApplied: true, canReadBack: true })).toMatchObject({ kind: 'needs-review' });
    // A row sent by an earlier attempt, whose read-back now failed on a GET: still may have applied.
    expect(decide(answer('GET', 503), { ...last, mayHaveApplied: true, canReadBack: true })).toMatchObject({ kind: 'read-back' });
  });

  it('never keeps card digits in a note', () => {
    const echoed = answer('POST', 400, undefined, 'Card 4111111111111111 was declined');
    const decision = decide(echoed, { attempt: 1, maxAttempts: 3 });
    expect(decision).toMatchObject({ kind: 'settle' });
    expect(JSON.stringify(decision)).not.toContain('4111111111111111');
  });
});
