import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { killAll, root, subsync, waitForOutput } from '../support/cli.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

beforeAll(() => {
  if (!existsSync(path.join(root, 'dist', 'src', 'cli.js'))) {
    throw new Error('dist/src/cli.js is missing: run `npm run build` first (`npm test` does)');
  }
});

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

describe('subsync dashboard', () => {
  it('serves on 127.0.0.1 behind SUBSYNC_DASHBOARD_TOKEN, and exits 0 on SIGTERM', async () => {
    pipeline = await startPipeline({ workers: false });
    const token = 'cli-dashboard-token';
    const run = subsync(['dashboard', '--port', '0'], {
      REDIS_URL: 'redis://127.0.0.1:6379',
      SUBSYNC_QUEUE_PREFIX: pipeline.prefix,
      SUBSYNC_DATA_DIR: pipeline.dataDir,
      SUBSYNC_DASHBOARD_TOKEN: token,
      SUBSYNC_LOG_LEVEL: 'warn',
    });
    const [, url] = await waitForOutput(run, /dashboard: (http:\/\/\S+) \(token required\)/);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${url}/`)).status).toBe(401);
    expect((await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);

    run.child.kill('SIGTERM');
    expect(await run.exited).toEqual({ code: 0, signal: null });
  });

  it('refuses a bad port with a usage error', async () => {
    const run = subsync(['dashboard', '--port', '70000']);
    expect((await run.exited).code).toBe(64);
    expect(run.stderr()).toContain('port number');
  });
});
