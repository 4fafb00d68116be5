import { describe, expect, it } from 'vitest';
import { describeStart, startAndPace } from '../../bench/rateAdherence.js';

describe("a rate run's start and pace", () => {
  it('are the first second, then the mean of the whole seconds after it, the last (partial) one left out', () => {
    const run = startAndPace([150, 195, 196, 194, 40]);
    expect(run).toEqual({ firstSecond: 150, afterFirst: 195 });
    expect(describeStart(run)).toBe('first second 150, then 195.0/s');
  });

  it('has no pace when the run is over within two seconds', () => {
    expect(startAndPace([120, 30])).toEqual({ firstSecond: 120, afterFirst: undefined });
    expect(startAndPace([])).toEqual({ firstSecond: 0, afterFirst: undefined });
    expect(describeStart(startAndPace([7]))).toBe('first second 7, then ?/s');
  });
});
