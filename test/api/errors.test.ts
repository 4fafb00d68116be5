import { describe, expect, it } from 'vitest';
import {
  ApiError,
  ApiNetworkError,
  ApiNotFoundError,
  ApiRateLimitedError,
  ApiRefusedError,
  ApiServerError,
  ApiTimeoutError,
  ApiUnauthorizedError,
  parseRetryAfter,
} from '../../src/api/errors.js';
import { SubsyncError } from '../../src/errors.js';

const now = Date.parse('2026-11-22T12:00:00Z');

describe('parseRetryAfter', () => {
  it.each([
    ['2', 2000],
    ['0', 0],
    ['1.5', 1500],
    [' 30 ', 30_000],
    ['Sun, 22 Nov 2026 12:00:05 GMT', 5000],
    ['Sun, 22 Nov 2026 11:59:00 GMT', 0],
  ])('reads %j as %d ms', (value, ms) => {
    expect(parseRetryAfter(value, now)).toBe(ms);
  });

  it.each([undefined, '', 'soon', '-3'])('gives nothing for %j', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined();
  });
});

describe('ApiError.fromResponse classifies once', () => {
  const classify = (status: number, method = 'POST', apiMessage?: string, retryAfter?: string) =>
    ApiError.fromResponse({ endpoint: 'createCustomer', method, status, apiMessage, retryAfter, now });

  it.each([
    [400, 'POST', undefined, ApiRefusedError, 'API_REFUSED', false, false],
    [422, 'POST', 'EmailAddress is invalid', ApiRefusedError, 'API_REFUSED', false, false],
    [409, 'POST', 'Temporarily locked, try again', ApiRefusedError, 'API_REFUSED', true, false],
    [401, 'GET', undefined, ApiUnauthorizedError, 'API_UNAUTHORIZED', false, false],
    [403, 'PUT', undefined, ApiUnauthorizedError, 'API_UNAUTHORIZED', false, false],
    [404, 'GET', 'Customer 1 was not found', ApiNotFoundError, 'API_NOT_FOUND', false, false],
    [408, 'POST', undefined, ApiRefusedError, 'API_REFUSED', true, false],
    [429, 'POST', undefined, ApiRateLimitedError, 'API_RATE_LIMITED', true, false],
    [500, 'POST', undefined, ApiServerError, 'API_SERVER_ERROR', true, true],
    [503, 'PUT', undefined, ApiServerError, 'API_SERVER_ERROR', true, true],
    [502, 'GET', undefined, ApiServerError, 'API_SERVER_ERROR', true, false],
  ] as const)('%d on %s (%s)', (status, method, apiMessage, Class, code, transient, maybeApplied) => {
    const error = classify(status, method, apiMessage);
    expect(error).toBeInstanceOf(Class);
    expect(error).toMatchObject({ code, status, transient, maybeApplied, endpoint: 'createCustomer', apiMessage });
  });

  it('carries Retry-After as retryAfterMs, and the API words in the message', () => {
    const error = classify(429, 'POST', 'Too many requests', '3');
    expect(error.retryAfterMs).toBe(3000);
    expect(error.message).toContain('Too many requests');
    expect(error.toJSON()).toMatchObject({ code: 'API_RATE_LIMITED', retryAfterMs: 3000, status: 429 });
  });

  it("is a subsync error, whose reason is the service's words with its code and status (what a row's reason says)", () => {
    const refused = classify(422, 'POST', 'EmailAddress is invalid');
    expect(refused).toBeInstanceOf(SubsyncError);
    expect(refused.codeAndStatus).toBe('API_REFUSED 422');
    expect(refused.reason).toBe('EmailAddress is invalid (API_REFUSED 422)');
    // Without the service's words, the message says what happened.
    const wordless = classify(500, 'POST', undefined);
    expect(wordless.reason).toBe(wordless.message);
    expect(wordless.reason).toContain('500');
  });
});

describe('ApiError.fromNetworkError', () => {
  const fail = (code: string | undefined, method = 'POST', nested = false) => {
    const inner = Object.assign(new Error(`boom ${code}`), code === undefined ? {} : { code });
    const error = nested ? Object.assign(new Error('fetch failed'), { cause: inner }) : inner;
    return ApiError.fromNetworkError({ endpoint: 'signUp', method, error });
  };

  it('a connection never opened cannot have applied anything', () => {
    for (const code of ['ECONNREFUSED', 'ENOTFOUND', 'UND_ERR_CONNECT_TIMEOUT']) {
      expect(fail(code)).toMatchObject({ transient: true, maybeApplied: false });
    }
  });

  it('a reset or timeout after sending may have applied a POST or PUT, never a GET', () => {
    expect(fail('ECONNRESET')).toBeInstanceOf(ApiNetworkError);
    expect(fail('ECONNRESET')).toMatchObject({ transient: true, maybeApplied: true });
    expect(fail('UND_ERR_SOCKET', 'PUT')).toMatchObject({ maybeApplied: true });
    expect(fail('UND_ERR_HEADERS_TIMEOUT')).toBeInstanceOf(ApiTimeoutError);
    expect(fail('UND_ERR_BODY_TIMEOUT', 'GET')).toMatchObject({ transient: true, maybeApplied: false });
  });

  it('finds the code on a wrapped cause, and treats an unknown failure as transient', () => {
    expect(fail('ECONNREFUSED', 'POST', true)).toMatchObject({ maybeApplied: false });
    expect(fail(undefined)).toMatchObject({ transient: true, maybeApplied: true, code: 'API_NETWORK' });
  });
});
