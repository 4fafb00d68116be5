import { existsSync } from 'node:fs';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;

/** Processes started by `pid` (Linux: /proc). */
async function childrenOf(pid: number): Promise<number[]> {
  const tasks = await readdir(`/proc/${pid}/task`).catch(() => []);
  const children = await Promise.all(tasks.map(async (task) => readFile(`/proc/${pid}/task/${task}/children`, 'utf8').catch(() => '')));
  return children.flatMap((text) => text.split(/\s+/).filter(Boolean).map(Number));
}

/** Whether process `pid` still runs (a zombie does not). */
async function runs(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  return stat !== undefined && !/^\d+ \(.*\) Z /.test(stat);
}

/** `subsync start` on the pipeline's sandbox, Redis prefix and data dir, its inbox read every 100 ms. */
function startOn(p: Pipeline, args: string[] = []) {
  return subsync(['start', '--port', '0', '--concurrency', '4', '--poll-ms', '100', '--settle-ms', '0', ...args], {
    REDIS_URL: 'redis://127.0.0.1:6379',
    SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
    SUBSYNC_QUEUE_PREFIX: p.prefix,
    SUBSYNC_API_URL: p.sandbox.url,
    SUBSYNC_DATA_DIR: p.dataDir,
    SUBSYNC_LOG_LEVEL: 'info',
  });
}

/** The watcher's process of a `start` that is watching: its one child, running `subsync watch`. */
async function watcherOf(run: ReturnType<typeof subsync>): Promise<number> {
  await waitForOutput(run, /SIGTERM or Ctrl-C stops it/);
  const pid = run.child.pid;
  if (pid === undefined) throw new Error('start has no pid');
  const children = await childrenOf(pid);
  expect(children).toHaveLength(1);
  const watcher = children[0] as number;
  expect((await readFile(`/proc/${watcher}/cmdline`, 'utf8')).split('\0')).toContain('watch');
  return watcher;
}
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

describe('subsync start', () => {
  it('runs worker, watcher and dashboard: a dropped file settles into done/ with results; exits 0 on SIGTERM', async () => {
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

  it('runs the watcher in a process of its own, which ends with start: on SIGTERM, and when start is killed outright', async () => {
    pipeline = await startPipeline({ workers: false });
    const inbox = path.join(pipeline.dataDir, 'elsewhere');
    const run = startOn(pipeline, ['--inbox', inbox, '--failed-retention', '7', '--priority', 'high']);
    const watcher = await watcherOf(run);
    expect(run.stderr()).toContain(`"watcherPid":${watcher}`);
    // It takes start's watch flags, and start tells the inbox it watches.
    const args = (await readFile(`/proc/${watcher}/cmdline`, 'utf8')).split('\0').filter(Boolean);
    expect(args.slice(args.indexOf('watch')).join(' ')).toBe(`watch --card-retention 0 --poll-ms 100 --inbox ${inbox} --settle-ms 0 --failed-retention 7 --priority high`);
    expect(run.stdout()).toContain(`watching ${inbox}\n`);
    run.child.kill('SIGTERM');
    expect((await run.exited).code).toBe(0);
    expect(await runs(watcher)).toBe(false);
    // The watcher's own log says why it stopped: its parent closed the channel between them.
    expect(run.stderr()).toContain('"signal":"parent gone","msg":"watcher stopping"');

    // Killed outright, start cannot stop its watcher: the watcher sees the channel close, and stops by itself.
    const killed = startOn(pipeline);
    const orphan = await watcherOf(killed);
    killed.child.kill('SIGKILL');
    await killed.exited;
    await until(async () => ((await runs(orphan)) ? undefined : true), 'the watcher of a killed start to end');
  });

  it('stops, exit 1 with one line, when its watcher dies: whatever restarts it restarts it whole', async () => {
    pipeline = await startPipeline({ workers: false });
    const run = startOn(pipeline);
    const watcher = await watcherOf(run);
    process.kill(watcher, 'SIGKILL');
    expect((await run.exited).code).toBe(1);
    expect(run.stderr()).toContain(`subsync: the inbox watcher (pid ${watcher}) exited (signal SIGKILL) while start ran; start stopped too\n`);
    expect(run.stderr()).toContain('"msg":"the inbox watcher exited: stopping dashboard and workers (active jobs finish)"');
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
