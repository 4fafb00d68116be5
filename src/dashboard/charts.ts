/**
 * Charts of an import's activity, drawn on the server as inline SVG (no
 * script, no library, nothing fetched): rows settled per second and 429s
 * per minute over the import's time, from its series (src/store/series.ts).
 * Built with the `html` template, so every text in them is escaped.
 */
import { bucketWidth, type SeriesPoint } from '../store/series.js';
import { html, type Html } from './html.js';

/** One value of a chart: at `x` seconds from the import's start. */
export interface ChartPoint {
  x: number;
  y: number;
}

export interface ChartOptions {
  title: string;
  yLabel: string;
  xLabel: string;
  /** A line (a rate), or bars (counts per bucket). */
  kind: 'line' | 'bars';
  /** For tests and the data attribute: what the chart shows. */
  name: string;
}

const WIDTH = 600;
const HEIGHT = 200;
const LEFT = 56;
const RIGHT = 12;
const TOP = 24;
const BOTTOM = 40;
/** Markers (and tooltips) on points only while they stay apart: a month-long import has some 2,800 buckets. */
const MAX_MARKERS = 120;

/** Seconds from the start as an axis label: 0:45, 12:30, 3:05:00. */
export function elapsed(seconds: number): string {
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${rest}` : `${m}:${rest}`;
}

/** A round top for the y axis: 1, 2 or 5 times a power of ten, at least the largest value. */
export function niceMax(value: number): number {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

const label = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(n < 1 ? 2 : 1));

/** An SVG chart of `points` (x in seconds from the start), with its axes and their labels. */
export function chart(points: readonly ChartPoint[], options: ChartOptions): Html {
  const plotW = WIDTH - LEFT - RIGHT;
  const plotH = HEIGHT - TOP - BOTTOM;
  const xMax = Math.max(1, ...points.map((p) => p.x));
  const yMax = niceMax(Math.max(0, ...points.map((p) => p.y)));
  const px = (x: number): number => Math.round((LEFT + (x / xMax) * plotW) * 10) / 10;
  const py = (y: number): number => Math.round((TOP + plotH - (y / yMax) * plotH) * 10) / 10;
  const yTicks = [0, yMax / 2, yMax];
  const xTicks = [0, xMax / 2, xMax];
  const body = options.kind === 'line'
    ? html`<polyline class="series" fill="none" stroke="#1f5fbf" stroke-width="1.5" points="${points.map((p) => `${px(p.x)},${py(p.y)}`).join(' ')}"></polyline>
${points.length <= MAX_MARKERS ? points.map((p) => html`<circle class="point" cx="${px(p.x)}" cy="${py(p.y)}" r="2" fill="#1f5fbf"><title>${elapsed(p.x)}: ${label(p.y)} ${options.yLabel}</title></circle>`) : undefined}`
    : points.map((p) => {
      const barW = Math.max(1, plotW / Math.max(1, points.length) - 1);
      const tip = points.length <= MAX_MARKERS ? html`<title>${elapsed(p.x)}: ${label(p.y)} ${options.yLabel}</title>` : undefined;
      return html`<rect class="point" x="${Math.round((px(p.x) - barW) * 10) / 10}" y="${py(p.y)}" width="${Math.round(barW * 10) / 10}" height="${Math.round((TOP + plotH - py(p.y)) * 10) / 10}" fill="#b3261e">${tip}</rect>`;
    });
  return html`<figure class="chart">
<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${HEIGHT}" width="${WIDTH}" height="${HEIGHT}" role="img" aria-label="${options.title}" data-chart="${options.name}" data-points="${points.length}">
<title>${options.title}</title>
<rect x="${LEFT}" y="${TOP}" width="${plotW}" height="${plotH}" fill="#fff" stroke="#d9dde3"></rect>
${yTicks.map((t) => html`<line x1="${LEFT}" x2="${LEFT + plotW}" y1="${py(t)}" y2="${py(t)}" stroke="#eef1f5"></line><text x="${LEFT - 6}" y="${py(t) + 4}" text-anchor="end" font-size="11" fill="#5b6470">${label(t)}</text>`)}
${xTicks.map((t) => html`<text x="${px(t)}" y="${TOP + plotH + 16}" text-anchor="middle" font-size="11" fill="#5b6470">${elapsed(t)}</text>`)}
${body}
<text class="axis-label" x="${LEFT + plotW / 2}" y="${HEIGHT - 6}" text-anchor="middle" font-size="12" fill="#1c2128">${options.xLabel}</text>
<text class="axis-label" transform="translate(14 ${TOP + plotH / 2}) rotate(-90)" text-anchor="middle" font-size="12" fill="#1c2128">${options.yLabel}</text>
</svg>
<figcaption>${options.title}</figcaption>
</figure>`;
}

/**
 * The series with every bucket from the start to `until` seconds (an empty
 * bucket is a zero, not a gap the line would bridge). Bounded as the series
 * is: a few thousand buckets at most.
 */
export function filledSeries(points: readonly SeriesPoint[], until: number): SeriesPoint[] {
  const byAt = new Map(points.map((p) => [p.at, p]));
  const end = Math.max(until, ...points.map((p) => p.at));
  const filled: SeriesPoint[] = [];
  for (let at = 0; at <= end; ) {
    const width = bucketWidth(at);
    filled.push(byAt.get(at) ?? { at, width, rows: 0, rateLimited: 0 });
    at += width;
  }
  return filled;
}

/** Rows/s and 429s/min charts of an import whose series is `points`, `age` seconds after its start (its last settle, once settled). */
export function activityCharts(points: readonly SeriesPoint[], age: number): Html {
  if (points.length === 0) return html`<p class="muted">No activity yet: the charts start with the first row settled.</p>`;
  const filled = filledSeries(points, age);
  // Plotted at the end of each bucket: the rate over the bucket just past.
  // From the start, where nothing had settled yet.
  const rows = [{ x: 0, y: 0 }, ...filled.map((p) => ({ x: p.at + p.width, y: p.rows / p.width }))];
  const limited = filled.map((p) => ({ x: p.at + p.width, y: (p.rateLimited / p.width) * 60 }));
  const total429 = points.reduce((sum, p) => sum + p.rateLimited, 0);
  return html`<div class="charts">
${chart(rows, { title: 'Rows settled per second', yLabel: 'rows/s', xLabel: 'time since the import started (h:min:s)', kind: 'line', name: 'rows' })}
${chart(limited, { title: `429 answers per minute (${total429} in all)`, yLabel: '429s/min', xLabel: 'time since the import started (h:min:s)', kind: 'bars', name: '429s' })}
</div>
<p class="hint">Buckets of 5 s in an import's first hour, 1 min in its first day, 1 h after; kept as long as the import.</p>`;
}
