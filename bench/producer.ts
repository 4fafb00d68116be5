/**
 * Row 2: the producer alone (parse + validate + enqueue, no workers) as
 * `subsync import FILE` in a child process: rows/s, CPU per row and peak RSS
 * (`/usr/bin/time -v`) and Redis memory per waiting row; the baseline is a
 * bare csv-parse of the same file with no validation.
 */
import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parse } from 'csv-parse';
import { Redis } from 'ioredis';
import { writeCustomersCsv } from './make-customers.js';
import { REDIS_URL, deleteKeys, log, spawnCli, timeVRssMb, usedMemory, type BenchRow } from './support.js';
import { randomUUID } from 'node:crypto';

/** A bare csv-parse of the file: rows/s, and CPU µs per row (this process's, while it parses). */
async function rawParse(file: string): Promise<{ rowsPerSecond: number; cpuUs: number }> {
  const started = performance.now();
  const cpu = process.cpuUsage();
  let records = 0;
  for await (const _record of createReadStream(file).pipe(parse({ bom: true, relax_column_count: true }))) records++;
  const used = process.cpuUsage(cpu);
  return { rowsPerSecond: (records - 1) / ((performance.now() - started) / 1000), cpuUs: (used.user + used.system) / (records - 1) };
}

/** CPU seconds (user + system) of a `/usr/bin/time -v` run, or undefined. */
function timeVCpuSeconds(stderr: string): number | undefined {
  const user = /User time \(seconds\): ([\d.]+)/.exec(stderr);
  const system = /System time \(seconds\): ([\d.]+)/.exec(stderr);
  return user && system ? Number(user[1]) + Number(system[1]) : undefined;
}

export async function producer(sizes: number[]): Promise<BenchRow[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-producer-'));
  const redis = new Redis(REDIS_URL);
  const out: BenchRow[] = [];
  try {
    for (const rows of sizes) {
      const file = path.join(dir, `customers-${rows}.csv`);
      await writeCustomersCsv(file, rows);
      const baseline = await rawParse(file);
      const prefix = `subsync-bench-${randomUUID().slice(0, 8)}`;
      const dataDir = await mkdtemp(path.join(dir, 'data-'));
      try {
        const before = await usedMemory(redis);
        const started = performance.now();
        const run = spawnCli(['import', file, '--kind', 'customers'], { PATH: process.env.PATH, REDIS_URL, SUBSYNC_QUEUE_PREFIX: prefix, SUBSYNC_DATA_DIR: dataDir, SUBSYNC_LOG_LEVEL: 'warn' }, { timeV: true });
        const code = await run.exited;
        const seconds = (performance.now() - started) / 1000;
        if (code !== 0) throw new Error(`subsync import exited ${code}: ${run.stderr().slice(-2000)}`);
        const after = await usedMemory(redis);
        const rss = timeVRssMb(run.stderr());
        const cpuSeconds = timeVCpuSeconds(run.stderr());
        const cpuUs = cpuSeconds === undefined ? undefined : (1e6 * cpuSeconds) / rows;
        const perRow = (after - before) / rows;
        log(
          `producer ${rows}: ${(rows / seconds).toFixed(0)} rows/s (${seconds.toFixed(1)} s), CPU ${cpuUs?.toFixed(1)} µs/row, peak RSS ${rss?.toFixed(0)} MB, Redis ${perRow.toFixed(0)} B/row; ` +
            `csv-parse ${baseline.rowsPerSecond.toFixed(0)} rows/s, ${baseline.cpuUs.toFixed(1)} µs/row; load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`,
        );
        const size = `${rows.toLocaleString('en')} rows`;
        const sizeNote = rows >= 100_000 ? 'full size' : 'full size: 1,000,000 (smaller for time)';
        await deleteKeys(prefix);
        out.push(
          { figure: `2. Producer, ${size}: parse + validate + enqueue, child process wall time incl. start (rows/s)`, subsync: rows / seconds, baseline: baseline.rowsPerSecond, baselineLabel: 'bare csv-parse of the file (rows/s)', note: `${sizeNote}; target ≥ 20,000 rows/s` },
          {
            figure: `2. Producer, ${size}: CPU per row, child process user + system incl. start (µs)`,
            subsync: cpuUs ?? 'not measured',
            baseline: baseline.cpuUs,
            baselineLabel: 'bare csv-parse of the file (µs/row)',
            note: 'what each row costs beside a bare parse (the pipeline counts CPU, not wall time)',
          },
          { figure: `2. Producer, ${size}: peak RSS (MB, /usr/bin/time -v)`, subsync: rss ?? 'not measured', baseline: 250, baselineLabel: 'target (MB)', note: 'target ≤ 250 MB, flat across sizes' },
          { figure: `2. Producer, ${size}: Redis used_memory per waiting row (bytes)`, subsync: perRow, baseline: 1536, baselineLabel: 'target (bytes)', note: 'INFO memory after − before, / rows; target ≤ 1.5 KB' },
        );
      } finally {
        await deleteKeys(prefix);
        await rm(file, { force: true });
      }
    }
    return out;
  } finally {
    await redis.quit();
    await rm(dir, { recursive: true, force: true });
  }
}
