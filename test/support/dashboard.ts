import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import type { Pipeline } from './pipeline.js';

export const TOKEN = 'dashboard-test-token-7f3a9c';

/** A dashboard on the pipeline's runtime, on a free port of 127.0.0.1, closed with the pipeline. */
/** `token` null: a dashboard without a token. */
export async function startTestDashboard(pipeline: Pipeline, token: string | null = TOKEN): Promise<Dashboard> {
  const dashboard = await startDashboard({ runtime: pipeline.runtime, host: '127.0.0.1', port: 0, ...(token === null ? {} : { token }) });
  pipeline.runtime.adopt(() => dashboard.close());
  return dashboard;
}
