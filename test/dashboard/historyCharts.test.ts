/** The activity charts as pure functions: axes, buckets filled with zeros, escaping. */
import { describe, expect, it } from 'vitest';
import { activityCharts, chart, elapsed, filledSeries, niceMax } from '../../src/dashboard/charts.js';

describe('charts', () => {
  it('labels time since the start and rounds the y axis up', () => {
    expect([0, 45, 750, 11_100].map(elapsed)).toEqual(['0:00', '0:45', '12:30', '3:05:00']);
    expect([0, 0.3, 7, 10, 11, 180, 4_200].map(niceMax)).toEqual([1, 0.5, 10, 10, 20, 200, 5_000]);
  });

  it('fills the buckets nothing settled in with zeros, widening with age', () => {
    const filled = filledSeries([{ at: 10, width: 5, rows: 3, rateLimited: 1 }, { at: 3_600, width: 60, rows: 2, rateLimited: 0 }], 3_700);
    expect(filled.slice(0, 3)).toEqual([
      { at: 0, width: 5, rows: 0, rateLimited: 0 },
      { at: 5, width: 5, rows: 0, rateLimited: 0 },
      { at: 10, width: 5, rows: 3, rateLimited: 1 },
    ]);
    expect(filled).toHaveLength(720 + 2);
    expect(filled.at(-2)).toEqual({ at: 3_600, width: 60, rows: 2, rateLimited: 0 });
    expect(filled.at(-1)).toEqual({ at: 3_660, width: 60, rows: 0, rateLimited: 0 });
  });

  it('draws a line from the start and bars per bucket, with escaped labels', () => {
    const svg = activityCharts([{ at: 0, width: 5, rows: 50, rateLimited: 3 }, { at: 5, width: 5, rows: 25, rateLimited: 0 }], 9).toString();
    // 10 then 5 rows/s (axis up to 10), from 0 at the start.
    expect(svg).toContain('points="56,160 322,24 588,92"');
    expect(svg.match(/<rect class="point"/g)).toHaveLength(2);
    expect(svg).toContain('429 answers per minute (3 in all)');
    const hostile = chart([{ x: 1, y: 1 }], { title: '<script>x</script>', yLabel: '"y"', xLabel: 'x & t', kind: 'line', name: 'n' }).toString();
    expect(hostile).not.toContain('<script>');
    expect(hostile).toContain('&lt;script&gt;x&lt;/script&gt;');
    expect(hostile).toContain('x &amp; t');
  });

  it('says there is nothing yet rather than drawing an empty chart', () => {
    expect(activityCharts([], 30).toString()).toContain('No activity yet');
  });
});
