import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

describe('subsync start', () => {
  it('runs worker, watcher and dashboard in one process: a dropped file settles into done/ with results; exits 0 on SIGTERM', async () => {
    // The pipeline gives the sandbox, a Redis prefix and a data dir; the spawned process does the work.
    pipeline = await startPipeline({ workers: false });
    const run = subsync(['start', '--port', '0', '--concurrency', '4', '--poll-ms', '100', '--settle-ms', '0'], {
      REDIS_URL: 'redis://127.0.0.1:6379',
      SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
      SUBSYNC_QUEUE_PREFIX: pipeline.prefix,
      SUBSYNC_API_URL: pipeline.sandbox.url,
      SUBSYNC_DATA_DIR: pipeline.dataDir,
      SUBSYNC_LOG_LEVEL: 'info',
    });
    const [, dashboardUrl] = await waitForOutput(run, /dashboard: (http:\/\/\S+)/);
    await waitForOutput(run, /SIGTERM or Ctrl-C stops it/);

    await writeFile(path.join(pipeline.dataDir, 'inbox', 'customers', 'dropped.csv'), 'FirstName,LastName,EmailAddress\nDrop,Started,drop.started@example.com\n');
    const done = path.join(pipeline.dataDir, 'done', 'dropped.csv');
    await until(async () => (existsSync(done) ? true : undefined), 'dropped.csv in done/');
    const [importId] = await pipeline.runtime.store.listImportIds();
    const resultsDir = path.join(pipeline.dataDir, 'results', importId ?? '');
    expect(await readFile(path.join(resultsDir, 'results.csv'), 'utf8')).toMatch(/Drop,Started,drop\.started@example\.com,1,created,\d+/);
    expect(pipeline.sandbox.store.customers().filter((c) => c.EmailAddress === 'drop.started@example.com')).toHaveLength(1);

    // The dashboard shows the same import (no token set: every route is open).
    const shown = await fetch(`${dashboardUrl}/api/imports/${importId}`);
    expect(shown.status).toBe(200);
    expect(await shown.text()).toContain('dropped.csv');

    run.child.kill('SIGTERM');
    expect((await run.exited).code).toBe(0);
    expect(run.stderr()).toContain('"msg":"stopping: dashboard, watcher, then workers (active jobs finish)"');
  });

  it('refuses --host 0.0.0.0 without SUBSYNC_DASHBOARD_TOKEN before starting anything: exit 78, one line', async () => {
    pipeline = await startPipeline({ workers: false });
    const run = subsync(['start', '--host', '0.0.0.0', '--port', '0'], {
      REDIS_URL: 'redis://127.0.0.1:6379',
      SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
      SUBSYNC_QUEUE_PREFIX: pipeline.prefix,
      SUBSYNC_API_URL: pipeline.sandbox.url,
      SUBSYNC_DATA_DIR: pipeline.dataDir,
      SUBSYNC_LOG_LEVEL: 'warn',
    });
    expect((await run.exited).code).toBe(78);
    expect(run.stderr()).toMatch(/^subsync: the dashboard on 0\.0\.0\.0 \(not a loopback address\) needs SUBSYNC_DASHBOARD_TOKEN[^\n]*\n$/);
    expect(run.stdout()).toBe('');
    // No watcher ran: it would have made the inbox.
    expect(existsSync(path.join(pipeline.dataDir, 'inbox'))).toBe(false);
  });
});
