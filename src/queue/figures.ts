import { AsyncLocalStorage } from 'node:async_hooks';
import type { ApiCall } from '../api/client.js';

/** API figures of one job run, summed into its import's counts when the run ends. */
export interface CallFigures {
  apiCalls: number;
  rateLimited: number;
}

/**
 * The job a request belongs to. The API client is shared by every job of a
 * process; its `onCall` hook finds the running job's figures here.
 */
export const jobFigures = new AsyncLocalStorage<CallFigures>();

/** The `onCall` hook that attributes each request to the job that made it. */
export function countCall(call: ApiCall): void {
  const figures = jobFigures.getStore();
  if (!figures) return;
  figures.apiCalls++;
  if (call.status === 429) figures.rateLimited++;
}
