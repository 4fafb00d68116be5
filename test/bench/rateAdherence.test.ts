import { describe, expect, it } from 'vitest';
import { describeStart, startAndPace, summariseRuns, timeline } from '../../bench/rateAdherence.js';

describe("a rate run's start and pace", () => {
  it('are the first second, then the mean of the whole seconds after it, the last (partial) one left out', () => {
    const run = startAndPace([150, 195, 196, 194, 40]);
    expect(run).toEqual({ firstSecond: 150, afterFirst: 195 });
    expect(describeStart(run)).toBe('first second 150, then 195.0/s');
  });

  it('gives the fullest sliding second when the sandbox counted it', () => {
    expect(describeStart({ ...startAndPace([150, 195, 196, 194, 40]), fullestSecond: 199 })).toBe('first second 150, then 195.0/s, fullest sliding second 199');
  });

  it('has no pace when the run is over within two seconds', () => {
    expect(startAndPace([120, 30])).toEqual({ firstSecond: 120, afterFirst: undefined });
    expect(startAndPace([])).toEqual({ firstSecond: 0, afterFirst: undefined });
    expect(describeStart(startAndPace([7]))).toBe('first second 7, then ?/s');
  });
});

describe('several rate runs', () => {
  const run = (achieved: number, rateLimited: number, firstSecond = 190) => ({ achieved, rateLimited, requests: 4005, firstSecond, afterFirst: 195 });

  it('are judged on the lowest, and count the runs that met the share with no 429', () => {
    const summary = summariseRuns([run(194.7, 0), run(191.0, 1, 178), run(194.9, 0)], 200, 0.97);
    expect(summary).toMatchObject({ lowest: 191.0, met: 2, rateLimited: 1, requests: 12_015 });
    expect(summary.each).toBe('194.7 [first second 190, then 195.0/s], 191.0 (1 × 429) [first second 178, then 195.0/s], 194.9 [first second 190, then 195.0/s]');
  });

  it('do not count a run under the share, even with no 429, nor one over it that met a 429', () => {
    expect(summariseRuns([run(193.9, 0), run(195.0, 1)], 200, 0.97).met).toBe(0);
    expect(summariseRuns([run(194.0, 0)], 200, 0.97).met).toBe(1);
  });
});

describe('a pass timeline', () => {
  const stats = { requests: 3_000, faults: { rateLimited: 0 }, fullestSecond: 1_450, perSecond: [700, 1_400, 900] };
  it('tells the start, the requests and their pace second by second, and the end apart', () => {
    const line = timeline(1_000, new Date(4_250).toISOString(), { ...stats, firstRequestAt: 1_300, lastRequestAt: 4_000 });
    expect(line).toBe("first request 300 ms after the import's start, then 2700 ms of requests (1111/s; second by second: 700, 1400, 900), finished 250 ms after the last");
  });
  it('says so when there was no request, or no finish', () => {
    expect(timeline(1_000, undefined, { ...stats, firstRequestAt: 1_300, lastRequestAt: 4_000 })).toMatch(/^no timeline/);
    expect(timeline(1_000, new Date(4_250).toISOString(), { ...stats, requests: 0, perSecond: [] })).toMatch(/^no timeline/);
    expect(timeline(1_000, new Date(1_400).toISOString(), { ...stats, requests: 1, perSecond: [1], firstRequestAt: 1_300, lastRequestAt: 1_300 })).toContain('(one instant;');
  });
});
