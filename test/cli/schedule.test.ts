import { access } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { EXPORT_SCHEDULER_ID } from '../../src/export/schedule.js';
import { createExportStore } from '../../src/export/state.js';
import { startWorkers } from '../../src/runtime.js';
import { killAll, subsync } from '../support/cli.js';
import { cliEnv } from '../support/exports.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

async function run(p: Pipeline, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = subsync(args, cliEnv(p));
  const { code } = await child.exited;
  return { code, stdout: child.stdout(), stderr: child.stderr() };
}

describe('subsync schedule', () => {
  it('registered from two processes at once, the export schedule exists once, fires, and is removed', async () => {
    pipeline = await startPipeline({ workers: false });
    const p = pipeline;
    const args = ['schedule', 'export', '--cron', '*/1 * * * * *', '--tz', 'UTC', '--format', 'jsonl', '--keep', '3'];
    const [a, b] = await Promise.all([run(p, args), run(p, args)]);
    expect([a.code, b.code]).toEqual([0, 0]);
    expect(a.stdout).toContain(`scheduled: ${EXPORT_SCHEDULER_ID}  "*/1 * * * * *" UTC  next `);

    const list = await run(p, ['schedule', 'list', '--json']);
    expect(list.code).toBe(0);
    const lines = list.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ id: EXPORT_SCHEDULER_ID, pattern: '*/1 * * * * *', tz: 'UTC', request: { format: 'jsonl', gzip: false, keep: 3 } });

    // It fires: a control worker runs the export it adds.
    startWorkers(p.runtime, { apiUrl: p.sandbox.url, concurrency: 2 });
    const store = createExportStore(p.runtime.redis, p.prefix);
    const done = await until(async () => (await store.recent(10)).find((r) => r.status === 'done'), 'a scheduled export to be written', 20_000);
    expect(done.jobId).toMatch(new RegExp(`^repeat:${EXPORT_SCHEDULER_ID}:\\d+$`));
    expect(done.file).toMatch(/\.jsonl$/);
    await access(done.file ?? '');

    const removed = await run(p, ['schedule', 'remove']);
    expect(removed.stdout).toContain(`removed schedule ${EXPORT_SCHEDULER_ID}`);
    expect((await run(p, ['schedule', 'list'])).stdout).toBe('no export schedule\n');
    expect((await run(p, ['schedule', 'remove'])).stdout).toBe('no export schedule to remove\n');
  });

  it('the nightly pattern registered twice is listed once; the second registration replaces the first', async () => {
    pipeline = await startPipeline({ workers: false });
    expect((await run(pipeline, ['schedule', 'export', '--cron', '0 2 * * *', '--tz', 'UTC'])).code).toBe(0);
    expect((await run(pipeline, ['schedule', 'export', '--cron', '0 2 * * *', '--tz', 'Europe/Paris', '--gzip'])).code).toBe(0);
    const list = await run(pipeline, ['schedule', 'list']);
    const lines = list.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^subsync-export {2}"0 2 \* \* \*" Europe\/Paris {2}next \d{4}-\d{2}-\d{2}T\d{2}:00:00\.000Z {2}\(csv gzip\)$/);
  });

  it('refuses a bad cron pattern or time zone as a usage error, naming it', async () => {
    pipeline = await startPipeline({ workers: false });
    const cron = await run(pipeline, ['schedule', 'export', '--cron', 'every night']);
    expect(cron.code).toBe(64);
    expect(cron.stderr).toContain('invalid cron pattern "every night"');
    const tz = await run(pipeline, ['schedule', 'export', '--cron', '0 2 * * *', '--tz', 'Mars/Olympus']);
    expect(tz.code).toBe(64);
    expect(tz.stderr).toContain('unknown time zone "Mars/Olympus"');
    expect((await run(pipeline, ['schedule', 'list'])).stdout).toBe('no export schedule\n');
  });
});
