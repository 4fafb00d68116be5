import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';
import { rawRequest } from '../support/http.js';
import { startPipeline, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

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

  it('refuses to listen beyond loopback without SUBSYNC_DASHBOARD_TOKEN: exit 78, one line', async () => {
    pipeline = await startPipeline({ workers: false });
    const run = subsync(['dashboard', '--host', '0.0.0.0', '--port', '0'], {
      REDIS_URL: 'redis://127.0.0.1:6379',
      SUBSYNC_QUEUE_PREFIX: pipeline.prefix,
      SUBSYNC_DATA_DIR: pipeline.dataDir,
      SUBSYNC_LOG_LEVEL: 'warn',
    });
    expect((await run.exited).code).toBe(78);
    expect(run.stderr()).toMatch(/^subsync: the dashboard on 0\.0\.0\.0 \(not a loopback address\) needs SUBSYNC_DASHBOARD_TOKEN[^\n]*\n$/);
    expect(run.stdout()).not.toContain('dashboard:');
  });

  it('on every interface with a token, answers to SUBSYNC_DASHBOARD_HOSTS and localhost names only', async () => {
    pipeline = await startPipeline({ workers: false });
    const token = 'cli-dashboard-token';
    const run = subsync(['dashboard', '--host', '0.0.0.0', '--port', '0'], {
      REDIS_URL: 'redis://127.0.0.1:6379',
      SUBSYNC_QUEUE_PREFIX: pipeline.prefix,
      SUBSYNC_DATA_DIR: pipeline.dataDir,
      SUBSYNC_DASHBOARD_TOKEN: token,
      SUBSYNC_DASHBOARD_HOSTS: 'subsync.internal, ops.example',
      SUBSYNC_LOG_LEVEL: 'warn',
    });
    const [, url] = await waitForOutput(run, /dashboard: (http:\/\/\S+) \(token required\)/);
    const port = new URL(url ?? '').port;
    const status = async (host: string): Promise<number> => (await rawRequest(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${token}`, host } })).status;
    expect(await status(`ops.example:${port}`)).toBe(200);
    expect(await status(`subsync.internal:${port}`)).toBe(200);
    expect(await status(`127.0.0.1:${port}`)).toBe(200);
    expect(await status(`attacker.example:${port}`)).toBe(421);
    run.child.kill('SIGTERM');
    expect((await run.exited).code).toBe(0);
  });

  it('refuses a bad port with a usage error', async () => {
    const run = subsync(['dashboard', '--port', '70000']);
    expect((await run.exited).code).toBe(64);
    expect(run.stderr()).toContain('port number');
  });
});
