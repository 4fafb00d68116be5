/**
 * Row 3: three `subsync worker` processes against a sandbox limited to
 * `limit` requests/s, with SUBSYNC_RATE = limit (paced just under it: no
 * 429 expected), and, second, unset: the fleet's adaptive rate finds the
 * limit from the 429s (figures: the 429 share, and the rate it learned).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { importFile } from '../src/import/producer.js';
import { createBudget } from '../src/redis/budget.js';
import { z } from 'zod';
import { writeCustomersCsv } from './make-customers.js';
import { log, openBenchRuntime, spawnCli, spawnSandbox, waitFinished, type BenchRow, type Spawned } from './support.js';

/** What the bench reads of `GET /_sandbox/stats`. */
export const SandboxStatsSchema = z.object({
  requests: z.number(),
  faults: z.object({ rateLimited: z.number() }),
  firstRequestAt: z.number().optional(),
  lastRequestAt: z.number().optional(),
  perSecond: z.array(z.number()),
  fullestSecond: z.number(),
});
export type SandboxStats = z.infer<typeof SandboxStatsSchema>;

export interface RateRun {
  /** Requests/s that reached the sandbox (429s included), first to last. */
  achieved: number;
  rateLimited: number;
  requests: number;
  /** The fleet's learned rate when the import finished (undefined: none learned). */
  learned: number | undefined;
  /** Requests in the first second, and the mean of the whole seconds after it (the last, partial, one left out): the start apart from the pace held. */
  firstSecond: number;
  afterFirst: number | undefined;
  /** The most requests the sandbox received in any 1000 ms: how near the run came to its limit (a 429 at limit + 1). */
  fullestSecond: number;
}

/** The first second's requests, and the mean of the whole seconds after it (not the last, which the run ends part-way through). */
export function startAndPace(perSecond: readonly number[]): { firstSecond: number; afterFirst: number | undefined } {
  const whole = perSecond.slice(1, -1);
  return { firstSecond: perSecond[0] ?? 0, afterFirst: whole.length === 0 ? undefined : whole.reduce((a, b) => a + b, 0) / whole.length };
}

/** "first second N, then X/s": how a run's start and its pace compare; with the fullest sliding second when known. */
export function describeStart(run: Pick<RateRun, 'firstSecond' | 'afterFirst'> & Partial<Pick<RateRun, 'fullestSecond'>>): string {
  const fullest = run.fullestSecond === undefined ? '' : `, fullest sliding second ${run.fullestSecond}`;
  return `first second ${run.firstSecond}, then ${run.afterFirst === undefined ? '?' : run.afterFirst.toFixed(1)}/s${fullest}`;
}

/**
 * Where a pass's time went: from the import's start to its first request at
 * the sandbox, the requests (their pace second by second from the first),
 * and from the last request to the import's finish (its results written).
 */
export function timeline(started: number, finishedAt: string | undefined, served: SandboxStats): string {
  const { firstRequestAt: first, lastRequestAt: last } = served;
  if (first === undefined || last === undefined || finishedAt === undefined) return 'no timeline (no request, or no finish time)';
  const span = last - first;
  const pace = span > 0 ? `${((1000 * served.requests) / span).toFixed(0)}/s` : 'one instant';
  return `first request ${first - started} ms after the import's start, then ${span} ms of requests (${pace}; second by second: ${served.perSecond.join(', ')}), finished ${Date.parse(finishedAt) - last} ms after the last`;
}

/**
 * Several runs of the same rate step, as the bench reports them: the lowest
 * rate used (the figure a target is judged on), how many runs met `share`
 * of `limit` with no 429, and each run's rate, 429s and start. One run
 * cannot tell a step that meets a 429 one time in six from one that never
 * does.
 */
export function summariseRuns(runs: ReadonlyArray<Pick<RateRun, 'achieved' | 'rateLimited' | 'requests' | 'firstSecond' | 'afterFirst'> & Partial<Pick<RateRun, 'fullestSecond'>>>, limit: number, share: number): { lowest: number; met: number; rateLimited: number; requests: number; each: string } {
  const each = runs.map((run) => `${run.achieved.toFixed(1)}${run.rateLimited === 0 ? '' : ` (${run.rateLimited} × 429)`} [${describeStart(run)}]`).join(', ');
  return {
    lowest: runs.length === 0 ? 0 : Math.min(...runs.map((run) => run.achieved)),
    met: runs.filter((run) => run.achieved / limit >= share && run.rateLimited === 0).length,
    rateLimited: runs.reduce((sum, run) => sum + run.rateLimited, 0),
    requests: runs.reduce((sum, run) => sum + run.requests, 0),
    each,
  };
}

/**
 * One import of `file` by three fresh `subsync worker` processes, started
 * beside it, SUBSYNC_RATE = `rate` (undefined: unset), against a sandbox
 * limited to `limit`/s. With `warmFile` (other people), the same fleet then
 * imports that too, measured apart from its first request: a fleet already
 * running, whose processes have loaded and whose code V8 has compiled, as
 * a long-running fleet meets every import after its first.
 */
export async function rateRun(file: string, rows: number, limit: number, rate: number | undefined, options: { redisUrl?: string; warmFile?: string } = {}): Promise<{ cold: RateRun; warm?: RateRun }> {
  // The service in its own process, as it would be: its limiter's clock does not stall with this process's work.
  const sandbox = await spawnSandbox(['--rate-limit', String(limit)]);
  const bench = await openBenchRuntime({ apiUrl: sandbox.url, ...(options.redisUrl === undefined ? {} : { redisUrl: options.redisUrl }) });
  const workers: Spawned[] = [];
  /** One import by the fleet, and what the sandbox counted since its stats were last reset. */
  const measured = async (csv: string): Promise<RateRun> => {
    const result = await importFile({ file: csv, kind: 'customers' }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger });
    if (result.outcome !== 'enqueued') throw new Error(`import not enqueued: ${result.outcome}`);
    const status = await waitFinished(bench.runtime, result.importId, 5 * 60_000);
    if (status.succeeded !== rows) log(`warning: ${status.succeeded} of ${rows} rows succeeded: ${JSON.stringify(status.counts)}`);
    const stats = SandboxStatsSchema.parse(await (await fetch(`${sandbox.url}/_sandbox/stats`)).json());
    const seconds = ((stats.lastRequestAt ?? 0) - (stats.firstRequestAt ?? 0)) / 1000;
    const learned = await createBudget(bench.runtime.redis, bench.runtime.store.keys, { rate: undefined }).learnedRate();
    return { achieved: stats.requests / seconds, rateLimited: stats.faults.rateLimited, requests: stats.requests, learned, ...startAndPace(stats.perSecond), fullestSecond: stats.fullestSecond };
  };
  try {
    const env = {
      ...bench.env,
      SUBSYNC_API_URL: sandbox.url,
      ...(rate === undefined ? {} : { SUBSYNC_RATE: String(rate) }),
    };
    for (let i = 0; i < 3; i++) workers.push(spawnCli(['worker'], env));
    const cold = await measured(file);
    if (options.warmFile === undefined) return { cold };
    // A second apart, as a file dropped after the last: the sliding second the sandbox counts holds nothing of the first import.
    await sleep(1_000);
    const reset = await fetch(`${sandbox.url}/_sandbox/stats`, { method: 'DELETE' });
    if (!reset.ok) throw new Error(`the sandbox's counts were not started again: HTTP ${reset.status}`);
    return { cold, warm: await measured(options.warmFile) };
  } finally {
    for (const w of workers) w.child.kill('SIGTERM');
    await Promise.all(workers.map((w) => w.exited));
    await bench.close();
    await sandbox.close();
  }
}

export async function rateAdherence(rows: number, limit: number): Promise<BenchRow[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-rate-'));
  try {
    const file = path.join(dir, 'customers.csv');
    await writeCustomersCsv(file, rows);
    const size = `${rows.toLocaleString('en')} rows${rows === 4000 ? '' : ' (the full size: 4,000)'}`;
    const { cold: known } = await rateRun(file, rows, limit, limit);
    log(`rate ${limit} known: ${known.achieved.toFixed(1)} req/s, ${known.rateLimited} × 429 of ${known.requests}; ${describeStart(known)}`);
    const { cold: unknown } = await rateRun(file, rows, limit, undefined);
    const share = (100 * unknown.rateLimited) / Math.max(1, unknown.requests);
    const learned = unknown.learned === undefined ? 'none learned' : `learned rate at the end ${unknown.learned.toFixed(1)}/s`;
    log(`rate ${limit} unset: ${unknown.achieved.toFixed(1)} req/s, ${unknown.rateLimited} × 429 of ${unknown.requests} (${share.toFixed(1)}%), ${learned}`);
    return [
      { figure: `3. Rate adherence, SUBSYNC_RATE=${limit}, sandbox limit ${limit}/s, 3 worker processes, ${size} (req/s at the sandbox)`, subsync: known.achieved, baseline: limit, baselineLabel: 'the limit (req/s)', note: `target ≥ 0.97; 429s: ${known.rateLimited} of ${known.requests} (target 0); ${describeStart(known)}` },
      { figure: `3. Rate, SUBSYNC_RATE unset (adaptive fleet-wide rate), same setup (req/s at the sandbox)`, subsync: unknown.achieved, baseline: limit, baselineLabel: 'the limit (req/s)', note: `target ≥ 0.9; 429 share ${share.toFixed(1)}% (${unknown.rateLimited} of ${unknown.requests}; target ≤ 2%); ${learned}; ratio counts 429s as requests` },
    ];
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
