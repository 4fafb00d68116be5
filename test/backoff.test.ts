/** The retry schedule of row jobs (src/policy.ts RETRY_DEFAULTS), as pure logic. */
import { describe, expect, it } from 'vitest';
import { RETRY_DEFAULTS, RETRY_MIN_SPAN_MS } from '../src/policy.js';
import { DEFAULT_BACKOFF, backoffCeiling, fullJitterBackoff, retrySpanMs } from '../src/backoff.js';

describe('the row retry schedule', () => {
  it('spans at least ten minutes over the default attempts even at the low end of the jitter', () => {
    const low = retrySpanMs(RETRY_DEFAULTS.attempts);
    expect(low).toBeGreaterThanOrEqual(RETRY_MIN_SPAN_MS);
    expect(RETRY_MIN_SPAN_MS).toBe(600_000);
    // The waits: 2-4 s, 6-12 s, 18-36 s, 54-108 s, 162-324 s, 300-600 s, 300-600 s.
    expect(Array.from({ length: RETRY_DEFAULTS.attempts - 1 }, (_, i) => backoffCeiling(i + 1))).toEqual([4_000, 12_000, 36_000, 108_000, 324_000, 600_000, 600_000]);
    expect(low).toBe(842_000);
    expect(retrySpanMs(RETRY_DEFAULTS.attempts, DEFAULT_BACKOFF, 'high')).toBe(1_684_000);
  });

  it('keeps every wait between half its ceiling and its ceiling, spread at random', () => {
    for (let made = 1; made < 10; made++) {
      const ceiling = backoffCeiling(made);
      for (const r of [0, 0.25, 0.5, 0.999]) {
        const wait = fullJitterBackoff(made, undefined, DEFAULT_BACKOFF, () => r);
        expect(wait).toBeGreaterThanOrEqual(ceiling / 2);
        expect(wait).toBeLessThan(ceiling);
      }
      // Different draws give different waits: a fleet's retries do not land together.
      expect(fullJitterBackoff(made, undefined, DEFAULT_BACKOFF, () => 0.1)).toBeLessThan(fullJitterBackoff(made, undefined, DEFAULT_BACKOFF, () => 0.9));
    }
  });

  it('never waits less than a Retry-After', () => {
    expect(fullJitterBackoff(1, 30_000, DEFAULT_BACKOFF, () => 0)).toBe(30_000);
  });

  it('is plain full jitter from 0 without a floor (export pages, searches)', () => {
    const bounds = { baseMs: 1_000, capMs: 60_000 };
    expect(fullJitterBackoff(3, undefined, bounds, () => 0)).toBe(0);
    expect(backoffCeiling(3, bounds)).toBe(4_000);
    // What the old row default allowed: eight attempts in well under a minute.
    expect(retrySpanMs(8, bounds, 'high')).toBeLessThan(130_000);
  });
});
