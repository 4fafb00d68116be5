import { Counter, Histogram, Registry } from 'prom-client';
import type { ApiCall } from './api/client.js';
import type { ImportKind, RowStatus } from './outcomes.js';

/**
 * The process's Prometheus metrics (served at the dashboard's /metrics).
 * Counters are per process: Prometheus sums them over the fleet. Gauges read
 * from Redis at scrape time (queue depth) are added by the dashboard.
 */
export const metricsRegistry = new Registry();

export const rowsSettled = new Counter({
  name: 'subsync_rows_settled_total',
  help: 'Rows settled by this process, by kind and outcome',
  labelNames: ['kind', 'status'] as const,
  registers: [metricsRegistry],
});

export const rowRetries = new Counter({
  name: 'subsync_row_retries_total',
  help: 'Row attempts after the first, by kind',
  labelNames: ['kind'] as const,
  registers: [metricsRegistry],
});

export const apiRateLimited = new Counter({
  name: 'subsync_api_rate_limited_total',
  help: 'API answers with status 429, by endpoint',
  labelNames: ['endpoint'] as const,
  registers: [metricsRegistry],
});

export const apiLatency = new Histogram({
  name: 'subsync_api_request_duration_seconds',
  help: 'API request duration, by endpoint and HTTP status ("error" when no answer came)',
  labelNames: ['endpoint', 'status'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15],
  registers: [metricsRegistry],
});

/** The API client's `onCall` hook for metrics. */
export function observeApiCall(call: ApiCall): void {
  apiLatency.observe({ endpoint: call.endpoint, status: call.status === undefined ? 'error' : String(call.status) }, call.durationMs / 1000);
  if (call.error?.code === 'API_RATE_LIMITED') apiRateLimited.inc({ endpoint: call.endpoint });
}

export function observeRowSettled(kind: ImportKind, status: RowStatus, rows = 1): void {
  rowsSettled.inc({ kind, status }, rows);
}

export function observeRetry(kind: ImportKind): void {
  rowRetries.inc({ kind });
}
