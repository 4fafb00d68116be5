/**
 * The row pipeline against the fastest raw loop, in one run
 * (`BENCH_ONLY=pipeline npm run bench`):
 *
 * - the raw loop: an undici Pool of 32 connections POSTing the creates of
 *   the file as fast as it can, in this process (its rows/s, and this
 *   process's CPU per row);
 * - subsync end to end: the same file imported (the producer in this
 *   process, as `subsync import` runs it) by one `subsync worker
 *   --concurrency 32` process, from the import's start to its results
 *   written; its CPU per row is the worker's, this process's and Redis's
 *   (a redis-server of its own, so other work on the machine's Redis does
 *   not count), each read from /proc before and after;
 *
 * each against a fresh sandbox in its own process (the service, whose CPU
 * counts on neither side), at 0, 10, 20 and 50 ms of service latency, the raw
 * loop and subsync one after the other at each. Each side runs twice, on
 * two files of different people: subsync's first import in a fresh worker
 * (cold: V8 is still compiling its code), its second in the same worker
 * (warm, as a worker is through most of a long migration); the raw loop's
 * two passes likewise. The table gives the CPU per row of both against
 * the raw loop's pass of the same rank. Then rate adherence:
 * SUBSYNC_RATE=200 with three workers against a sandbox limited to 200/s,
 * BENCH_PIPELINE_RATE_RUNS times (default 3, each with fresh workers and a
 * fresh sandbox): the target holds only if every run meets it. Each run
 * measures two imports: the fleet's first, its processes started with it
 * (cold), then, the sandbox's counts started again, the same fleet's second
 * of other people (warm, as a fleet that keeps running meets most imports).
 *
 * BENCH_PIPELINE_ROWS (default 20,000), BENCH_PIPELINE_LATENCIES (default
 * 0,10,20,50), BENCH_PIPELINE_RATE_ROWS (default 4,000) shrink it for a quick look.
 * BENCH_PIPELINE_CONCURRENCY (default 32) sets the requests out at once on
 * every side (the raw loop's connections, the floor's, the worker's
 * --concurrency): at a given latency, more requests out means more answers
 * a second, and the CPU per row of every side changes with that, not with
 * the latency itself. The targets are for 32.
 * BENCH_PIPELINE_PROF=<dir> writes a CPU profile of the worker of each
 * latency there (node --cpu-prof; its sampling costs the worker some CPU).
 * BENCH_PIPELINE_NODE_ARGS="--flag …" starts the worker with those Node
 * flags (to try a V8 or GC setting).
 * BENCH_PIPELINE_SLOWLOG=1 logs the time Redis spent per script and
 * command (its slow log at 0 µs: it slows Redis, so the figures of that
 * run are not comparable). BENCH_PIPELINE_ALLOW_DUPLICATES=1 imports with
 * --allow-duplicates (no duplicate guard): the guard's cost is the
 * difference.
 *
 * Beside both, the exactly-once floor: the raw loop's requests with a
 * `sent` mark before each and a settle after, in Redis, gathered per turn
 * of the event loop as subsync gathers them. It is what the protocol alone
 * costs, so the distance from it to subsync is subsync's own code. And the
 * same floor with the duplicate guard done the leanest way: each row's
 * person claimed and looked up in an index in the mark's call, written
 * into the index (its claim let go) in the settle's.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import { importFile } from '../src/import/producer.js';
import { fieldKey, freshDigestOf, identityKey, type Person } from '../src/customers/identity.js';
import { coalesce } from '../src/redis/coalesce.js';
import { KNOWN_RATE_MARGIN } from '../src/redis/budget.js';
import { createBodies } from './importThroughput.js';
import { writeCustomersCsv } from './make-customers.js';
import { describeStart, rateRun, SandboxStatsSchema, summariseRuns, timeline, type RateRun } from './rateAdherence.js';
import { log, openBenchRuntime, processCpuMs, runConcurrent, spawnCli, spawnSandbox, waitFinished, waitForLine, type BenchRow } from './support.js';

/** Requests out at once on every side, unless BENCH_PIPELINE_CONCURRENCY says otherwise (the targets are for 32). */
export const PIPELINE_CONCURRENCY = 32;
/** The tag that makes the warm pass's people others than the cold pass's (make-customers.ts). */
const WARM_TAG = 'warm';
/** How often the bench reads the import's status while it waits (ms). */
const STATUS_POLL_MS = 250;

/** Targets of the pipeline: rows/s over the raw loop's at a latency, CPU per row over the raw loop's. */
export const PIPELINE_TARGETS = {
  /** rows/s ratio, by service latency in ms (none at 0 and 10 ms: those passes are for scale). */
  throughput: new Map<number, number>([
    [20, 0.9],
    [50, 0.95],
  ]),
  cpuPerRow: 2,
  rateShare: 0.97,
};

interface Side {
  rowsPerSecond: number;
  /** CPU per row in µs, and its parts. */
  cpuUs: number;
  parts: Record<string, number>;
  /** Redis commands per row (INFO commandstats, those run inside scripts included); subsync only. */
  redisCalls?: number;
}

export async function pipelineBench(options: { rows: number; latencies: number[]; rateRows: number; rateRuns: number; concurrency?: number }): Promise<BenchRow[]> {
  const { rows, latencies, rateRows, rateRuns } = options;
  const concurrency = options.concurrency ?? PIPELINE_CONCURRENCY;
  // The targets are set at 32 requests out: at another concurrency the verdicts are for comparison only.
  const targetsApply = concurrency === PIPELINE_CONCURRENCY;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-pipeline-'));
  const redis = await startRedis();
  const out: BenchRow[] = [];
  try {
    // Two files of different people: the first import runs in a fresh worker (cold: V8 still compiling
    // subsync's code), the second in the same worker right after (warm, as a worker is through most of a
    // long migration). The raw loop sends the same two sets of bodies, one after the other, likewise.
    const files = [path.join(dir, 'customers.csv'), path.join(dir, 'customers-warm.csv')];
    await writeCustomersCsv(files[0] as string, rows);
    await writeCustomersCsv(files[1] as string, rows, { uniqueTag: WARM_TAG });
    const passes = [createBodies(rows), createBodies(rows, WARM_TAG)];
    for (const latencyMs of latencies) {
      const [raw, rawWarm] = await rawLoop(passes, latencyMs, concurrency) as [Side, Side];
      log(`pipeline ${latencyMs} ms: raw ${raw.rowsPerSecond.toFixed(0)} rows/s, ${raw.cpuUs.toFixed(0)} µs/row; warm ${rawWarm.rowsPerSecond.toFixed(0)} rows/s, ${rawWarm.cpuUs.toFixed(0)} µs/row`);
      const floor = await floorLoop(passes[0] as string[], latencyMs, redis, concurrency);
      log(`pipeline ${latencyMs} ms: floor ${floor.rowsPerSecond.toFixed(0)} rows/s, ${floor.cpuUs.toFixed(0)} µs/row ${JSON.stringify(floor.parts)}`);
      const guardedFloor = await floorLoop(passes[0] as string[], latencyMs, redis, concurrency, true);
      log(`pipeline ${latencyMs} ms: floor with the guard ${guardedFloor.rowsPerSecond.toFixed(0)} rows/s, ${guardedFloor.cpuUs.toFixed(0)} µs/row ${JSON.stringify(guardedFloor.parts)}`);
      const [sub, subWarm] = await subsyncSide(files, rows, latencyMs, redis, concurrency) as [Side, Side];
      for (const [pass, side] of [['cold', sub], ['warm', subWarm]] as const) {
        log(`pipeline ${latencyMs} ms: subsync ${pass} ${side.rowsPerSecond.toFixed(0)} rows/s, ${side.cpuUs.toFixed(0)} µs/row ${JSON.stringify(side.parts)}, ${side.redisCalls?.toFixed(1)} Redis commands/row`);
      }
      const size = `${rows.toLocaleString('en')} creates, c${concurrency}, ${latencyMs} ms`;
      const target = PIPELINE_TARGETS.throughput.get(latencyMs);
      const speed = sub.rowsPerSecond / raw.rowsPerSecond;
      out.push({
        figure: `Pipeline: ${size}: rows/s, subsync end to end / raw undici loop`,
        subsync: sub.rowsPerSecond,
        baseline: raw.rowsPerSecond,
        baselineLabel: `raw undici Pool, ${concurrency} connections (rows/s)`,
        note: `${target === undefined ? 'no target' : verdict(speed >= target, `target ≥ ${target.toFixed(2)}${targetsApply ? '' : ' at c32'}`)}; warm: ${subWarm.rowsPerSecond.toFixed(0)} / ${rawWarm.rowsPerSecond.toFixed(0)} = ${(subWarm.rowsPerSecond / rawWarm.rowsPerSecond).toFixed(2)}`,
      });
      out.push({
        figure: `Pipeline: ${size}: CPU per row (µs), the exactly-once floor (a sent mark and a settle in Redis around each request) / raw loop`,
        subsync: floor.cpuUs,
        baseline: raw.cpuUs,
        baselineLabel: 'raw loop process (µs/row)',
        note: `what the protocol alone costs, for scale: loop ${floor.parts.loop?.toFixed(0)}, Redis ${floor.parts.redis?.toFixed(0)}; ${floor.rowsPerSecond.toFixed(0)} rows/s`,
      });
      out.push({
        figure: `Pipeline: ${size}: CPU per row (µs), the floor with the duplicate guard (claim and index read in the mark's call, index write and release in the settle's) / raw loop`,
        subsync: guardedFloor.cpuUs,
        baseline: raw.cpuUs,
        baselineLabel: 'raw loop process (µs/row)',
        note: `for scale: loop ${guardedFloor.parts.loop?.toFixed(0)}, Redis ${guardedFloor.parts.redis?.toFixed(0)}; ${guardedFloor.rowsPerSecond.toFixed(0)} rows/s`,
      });
      // What no worker can go under: the guarded floor's requests, marks, settles and guard, plus the file read,
      // checked and queued by subsync's own producer (this run's cold pass). The target is set against the raw loop
      // alone, so this row says how much of it these steps leave for everything else a worker does.
      const least = guardedFloor.cpuUs + (sub.parts.import ?? 0);
      out.push({
        figure: `Pipeline: ${size}: CPU per row (µs), the floor with the guard plus subsync's producer (the least these steps cost) / raw loop`,
        subsync: least,
        baseline: raw.cpuUs,
        baselineLabel: 'raw loop process (µs/row)',
        note: `for scale: guarded floor ${guardedFloor.cpuUs.toFixed(0)}, producer ${(sub.parts.import ?? 0).toFixed(0)}; the target ≤ ${PIPELINE_TARGETS.cpuPerRow.toFixed(2)} leaves ${Math.max(0, PIPELINE_TARGETS.cpuPerRow * raw.cpuUs - least).toFixed(0)} µs/row for the queue, the ledger's entries, the results and the rest`,
      });
      for (const [pass, side, base] of [['a fresh worker', sub, raw], ['the same worker, warm (its second import; raw: its second pass)', subWarm, rawWarm]] as const) {
        const cpu = side.cpuUs / base.cpuUs;
        const parts = Object.entries(side.parts).map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ');
        out.push({
          figure: `Pipeline: ${size}: CPU per row (µs), subsync (worker + import + Redis) / raw loop, ${pass}`,
          subsync: side.cpuUs,
          baseline: base.cpuUs,
          baselineLabel: 'raw loop process (µs/row)',
          note: `${verdict(cpu <= PIPELINE_TARGETS.cpuPerRow, `target ≤ ${PIPELINE_TARGETS.cpuPerRow.toFixed(2)}${targetsApply ? '' : ' at c32'}`)}; ${parts}; Redis ${side.redisCalls?.toFixed(1)} commands/row`,
        });
      }
    }
    const rateFile = path.join(dir, 'rate.csv');
    const warmRateFile = path.join(dir, 'rate-warm.csv');
    await writeCustomersCsv(rateFile, rateRows);
    await writeCustomersCsv(warmRateFile, rateRows, { uniqueTag: 'warm' });
    const runs: { cold: RateRun[]; warm: RateRun[] } = { cold: [], warm: [] };
    for (let run = 1; run <= rateRuns; run++) {
      const { cold, warm } = await rateRun(rateFile, rateRows, 200, 200, { redisUrl: redis.url, warmFile: warmRateFile });
      for (const [pass, rate] of [['cold', cold], ['warm', warm]] as const) {
        if (rate === undefined) continue;
        log(`pipeline rate, run ${run} of ${rateRuns}, ${pass}: ${rate.achieved.toFixed(1)} req/s, ${rate.rateLimited} × 429 of ${rate.requests}; ${describeStart(rate)}`);
        runs[pass].push(rate);
      }
    }
    const fleets = {
      cold: `3 worker processes started with the import`,
      warm: `the same 3 workers' second import (other people), a fleet already running`,
    };
    for (const pass of ['cold', 'warm'] as const) {
      const rates = runs[pass];
      const rate = summariseRuns(rates, 200, PIPELINE_TARGETS.rateShare);
      out.push({
        figure: `Pipeline: rate adherence, SUBSYNC_RATE=200, sandbox limit 200/s, ${fleets[pass]}, ${rateRows.toLocaleString('en')} rows, ${rateRuns} run${rateRuns === 1 ? '' : 's'} (req/s at the sandbox, the lowest run)`,
        subsync: rate.lowest,
        baseline: 200,
        baselineLabel: 'the limit (req/s)',
        note: `${verdict(rates.length > 0 && rate.met === rates.length, `target ≥ ${PIPELINE_TARGETS.rateShare} and no 429, in every run`)}; ${rate.met} of ${rates.length} runs met it; 429s: ${rate.rateLimited} of ${rate.requests}; each run: ${rate.each} (the pace: ${(200 * (1 - KNOWN_RATE_MARGIN)).toFixed(0)}/s)`,
      });
    }
    return out;
  } finally {
    await redis.close();
    await rm(dir, { recursive: true, force: true });
  }
}

const verdict = (pass: boolean, target: string): string => `${target}: ${pass ? 'pass' : 'FAIL'}`;

/** The raw loop: every create POSTed through one undici Pool, 32 at a time, against a fresh sandbox; one Side per pass, the passes one after the other. */
async function rawLoop(passes: string[][], latencyMs: number, concurrency: number): Promise<Side[]> {
  const sandbox = await spawnSandbox(latencyMs > 0 ? ['--latency', String(latencyMs)] : []);
  const pool = new Pool(sandbox.url, { connections: concurrency, pipelining: 1 });
  try {
    const sides: Side[] = [];
    for (const bodies of passes) {
      const before = process.cpuUsage();
      const seconds = await runConcurrent(bodies.length, concurrency, async (i) => {
        const response = await pool.request({ method: 'POST', path: '/json/customers', headers: { 'content-type': 'application/json' }, body: bodies[i] });
        await response.body.json();
      });
      const used = process.cpuUsage(before);
      const cpuUs = (used.user + used.system) / bodies.length;
      sides.push({ rowsPerSecond: bodies.length / seconds, cpuUs, parts: { raw: cpuUs } });
    }
    return sides;
  } finally {
    await pool.close();
    await sandbox.close();
  }
}

// The floor's ledger: a row is marked sent unless settled, and settled once. KEYS: the ledger hash. ARGV: rows (mark), or row, CustomerID pairs (settle).
const FLOOR_MARK_LUA = `local out = {}
for i = 1, #ARGV do
  local now = redis.call('HGET', KEYS[1], ARGV[i])
  if now == false or now == 'p' then redis.call('HSET', KEYS[1], ARGV[i], 's'); out[i] = 1 else out[i] = 0 end
end
return out`;
const FLOOR_SETTLE_LUA = `local out = {}
for i = 1, #ARGV, 2 do
  local now = redis.call('HGET', KEYS[1], ARGV[i])
  if now == 's' then redis.call('HSET', KEYS[1], ARGV[i], 'c' .. ARGV[i + 1]); out[#out + 1] = 1 else out[#out + 1] = 0 end
end
return out`;
// The guarded floor's mark: each row's person claimed and looked up in the index in the same call; a person
// the index holds lets the claim go and is not marked (nor sent), another's claim is not marked either.
// KEYS: ledger, claims, then each row's identity bucket. ARGV: (row, identity digest, claimant) per row.
const GUARDED_MARK_LUA = `local out = {}
for i = 3, #KEYS do
  local a = 3 * (i - 3)
  local row, digest, claimant = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  out[i - 2] = 0
  if redis.call('HSETNX', KEYS[2], digest, claimant) == 1 then
    if redis.call('HGET', KEYS[i], digest) then redis.call('HDEL', KEYS[2], digest)
    else
      local now = redis.call('HGET', KEYS[1], row)
      if now == false or now == 'p' then redis.call('HSET', KEYS[1], row, 's'); out[i - 2] = 1 end
    end
  end
end
return out`;
// Its settle: the row settled once, its claim let go, its identity and email written into the index.
// KEYS: ledger, claims, then each row's identity bucket and email bucket. ARGV: (row, CustomerID, identity digest, claimant, email digest) per row.
const GUARDED_SETTLE_LUA = `local out = {}
local n = 0
for i = 1, #ARGV, 5 do
  n = n + 1
  local row, id, digest, claimant, email = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  out[n] = 0
  if redis.call('HGET', KEYS[1], row) == 's' then
    redis.call('HSET', KEYS[1], row, 'c' .. id)
    out[n] = 1
  end
  if redis.call('HGET', KEYS[2], digest) == claimant then redis.call('HDEL', KEYS[2], digest) end
  redis.call('HSETNX', KEYS[1 + 2 * n], digest, id)
  redis.call('HSETNX', KEYS[2 + 2 * n], email, id)
end
return out`;
/** Index buckets of the guarded floor, per kind: about 10 entries each at 20,000 rows. */
const FLOOR_BUCKETS = 2_000;

/** A guarded floor row's person, as its claim and index keys need it. */
interface FloorGuard {
  claimant: string;
  identity: Buffer;
  email: Buffer;
  identityBucket: string;
  emailBucket: string;
}

/**
 * The floor of any loop that creates nothing twice: the raw loop's requests,
 * each row marked `sent` in Redis before its request leaves and settled
 * after its answer, the marks and settles of one turn of the event loop in
 * one script call each (as subsync gathers them). No CSV, no queue, no
 * guard, no budget: what exactly-once alone costs over a bare request. Its
 * CPU is this process's and Redis's.
 *
 * `guarded` adds the duplicate guard done the leanest way: each row's
 * person (its identity and email digested in the loop, as subsync does) is
 * claimed and looked up in an index in the mark's call, and written into
 * the index, its claim let go, in the settle's. Its index is small and
 * fresh (no large base in it), so it is a floor too.
 */
async function floorLoop(bodies: string[], latencyMs: number, redis: OwnRedis, concurrency: number, guarded = false): Promise<Side> {
  const sandbox = await spawnSandbox(latencyMs > 0 ? ['--latency', String(latencyMs)] : []);
  const pool = new Pool(sandbox.url, { connections: concurrency, pipelining: 1 });
  const client = new Redis(redis.url);
  const ledger = `floor:${Date.now()}`;
  const claims = `${ledger}:claims`;
  const buckets = new Set<string>();
  const bucketOf = (kind: string, digest: Buffer): string => {
    const key = `${ledger}:${kind}:${digest.readUInt32BE(0) % FLOOR_BUCKETS}`;
    buckets.add(key);
    return key;
  };
  // The people are read from the bodies before the clock starts: subsync has them from the row's cells.
  const people = guarded ? bodies.map((body) => JSON.parse(body) as Person) : [];
  const guardOf = (i: number, row: string): FloorGuard | undefined => {
    const person = people[i];
    if (!person) return undefined;
    const identity = freshDigestOf(identityKey(person));
    const email = freshDigestOf(fieldKey('EmailAddress', person.EmailAddress));
    return { claimant: `floor:${row}`, identity, email, identityBucket: bucketOf('i', identity), emailBucket: bucketOf('e', email) };
  };
  const answers = (reply: unknown, n: number): boolean[] => {
    if (!Array.isArray(reply) || reply.length !== n) throw new Error(`floor: unexpected script reply ${String(reply)}`);
    return reply.map((v) => v === 1);
  };
  type Marked = { row: string; guard: FloorGuard | undefined };
  type Settled = Marked & { id: string };
  const mark = coalesce<Marked, boolean>(async (_k, rows) => {
    if (!guarded) return answers(await client.eval(FLOOR_MARK_LUA, 1, ledger, ...rows.map((r) => r.row)), rows.length);
    const keys = [ledger, claims, ...rows.map((r) => r.guard?.identityBucket ?? '')];
    return answers(await client.eval(GUARDED_MARK_LUA, keys.length, ...keys, ...rows.flatMap((r) => [r.row, r.guard?.identity ?? '', r.guard?.claimant ?? ''])), rows.length);
  });
  const settle = coalesce<Settled, boolean>(async (_k, rows) => {
    if (!guarded) return answers(await client.eval(FLOOR_SETTLE_LUA, 1, ledger, ...rows.flatMap((r) => [r.row, r.id])), rows.length);
    const keys = [ledger, claims, ...rows.flatMap((r) => [r.guard?.identityBucket ?? '', r.guard?.emailBucket ?? ''])];
    return answers(await client.eval(GUARDED_SETTLE_LUA, keys.length, ...keys, ...rows.flatMap((r) => [r.row, r.id, r.guard?.identity ?? '', r.guard?.claimant ?? '', r.guard?.email ?? ''])), rows.length);
  });
  try {
    const before = { self: process.cpuUsage(), redis: await processCpuMs(redis.pid) };
    const seconds = await runConcurrent(bodies.length, concurrency, async (i) => {
      const row = String(i);
      const guard = guardOf(i, row);
      if (!(await mark('', { row, guard }))) throw new Error(`floor: row ${row} not marked`);
      const response = await pool.request({ method: 'POST', path: '/json/customers', headers: { 'content-type': 'application/json' }, body: bodies[i] });
      const created = (await response.body.json()) as { CustomerID?: string };
      if (!(await settle('', { row, guard, id: String(created.CustomerID) }))) throw new Error(`floor: row ${row} not settled`);
    });
    const used = process.cpuUsage(before.self);
    const self = (used.user + used.system) / bodies.length;
    const redisUs = (1000 * ((await processCpuMs(redis.pid)) - before.redis)) / bodies.length;
    return { rowsPerSecond: bodies.length / seconds, cpuUs: self + redisUs, parts: { loop: self, redis: redisUs } };
  } finally {
    const keys = [ledger, claims, ...buckets];
    for (let at = 0; at < keys.length; at += 500) await client.del(...keys.slice(at, at + 500));
    client.disconnect();
    await pool.close();
    await sandbox.close();
  }
}

/**
 * Imports of `files`, one after the other, through one worker process at
 * `concurrency`, each from its start to its results written: one Side per
 * file (the first in a fresh worker, the next ones in the same worker, warm).
 */
async function subsyncSide(files: string[], rows: number, latencyMs: number, redis: OwnRedis, concurrency: number): Promise<Side[]> {
  const sandbox = await spawnSandbox(latencyMs > 0 ? ['--latency', String(latencyMs)] : []);
  const bench = await openBenchRuntime({ apiUrl: sandbox.url, redisUrl: redis.url });
  const env = { ...bench.env, SUBSYNC_API_URL: sandbox.url };
  const profDir = process.env.BENCH_PIPELINE_PROF;
  const nodeArgs = [
    ...(profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`, `--cpu-prof-name=worker-${latencyMs}ms-${Date.now()}.cpuprofile`] : []),
    ...(process.env.BENCH_PIPELINE_NODE_ARGS?.split(' ').filter(Boolean) ?? []),
  ];
  const worker = spawnCli(['worker', '--concurrency', String(concurrency)], env, { nodeArgs });
  // A worker that dies is told at once, with its last words, not after the wait's timeout.
  const died = worker.exited.then((code) => {
    throw new Error(`the worker exited (${code}) before the import finished: ${worker.stderr().slice(-1500)}`);
  });
  died.catch(() => undefined);
  try {
    await waitForLine(worker, /worker running/, 20_000);
    const sides: Side[] = [];
    for (const [pass, file] of files.entries()) {
      if (process.env.BENCH_PIPELINE_SLOWLOG === '1') await redis.slowlog(true);
      const before = { worker: await processCpuMs(worker.child.pid), threads: await threadCpu(worker.child.pid), redis: await processCpuMs(redis.pid), self: process.cpuUsage(), calls: await redis.commands(), byCommand: await redis.byCommand(), net: await redis.netBytes() };
      // Counted again from this pass's first request, so the pass's start and end can be told apart from its pace.
      const reset = await fetch(`${sandbox.url}/_sandbox/stats`, { method: 'DELETE' });
      if (!reset.ok) throw new Error(`the sandbox did not reset its stats: ${reset.status}`);
      const started = Date.now();
      const result = await importFile({ file, kind: 'customers', ...(process.env.BENCH_PIPELINE_ALLOW_DUPLICATES === '1' ? { allowDuplicates: true } : {}) }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger, redis: bench.runtime.redis });
      if (result.outcome !== 'enqueued') throw new Error(`import not enqueued: ${result.outcome}`);
      // Polled every 250 ms, not 50: each status read costs the bench's process and Redis CPU that would count
      // against subsync; the time is taken from the import's own finishedAt, so the slower poll costs no precision.
      const status = await Promise.race([waitFinished(bench.runtime, result.importId, 10 * 60_000, STATUS_POLL_MS), died]);
      const seconds = ((status.finishedAt === undefined ? Date.now() : Date.parse(status.finishedAt)) - started) / 1000;
      const self = process.cpuUsage(before.self);
      const parts = {
        worker: (1000 * ((await processCpuMs(worker.child.pid)) - before.worker)) / rows,
        import: (self.user + self.system) / rows,
        redis: (1000 * ((await processCpuMs(redis.pid)) - before.redis)) / rows,
      };
      const redisCalls = ((await redis.commands()) - before.calls) / rows;
      const name = pass === 0 ? 'cold' : 'warm';
      const threads = [...(await threadCpu(worker.child.pid))].map(([thread, ms]) => `${thread} ${((1000 * (ms - (before.threads.get(thread) ?? 0))) / rows).toFixed(0)}`).join(', ');
      log(`pipeline ${latencyMs} ms ${name}: the worker's CPU by thread, µs a row: ${threads}`);
      const afterBy = await redis.byCommand();
      if (process.env.BENCH_PIPELINE_SLOWLOG === '1') log(await redis.slowlog(false));
      const perCommand = [...afterBy]
        .map(([command, n]) => ({ command, calls: (n.calls - (before.byCommand.get(command)?.calls ?? 0)) / rows, usec: (n.usec - (before.byCommand.get(command)?.usec ?? 0)) / rows }))
        .filter((c) => c.calls >= 0.01)
        .sort((a, b) => b.usec - a.usec);
      log(`pipeline ${latencyMs} ms ${name}: Redis a row, by command (calls, µs): ${perCommand.map((c) => `${c.command} ${c.calls.toFixed(2)} ${c.usec.toFixed(1)}`).join(', ')}`);
      const net = await redis.netBytes();
      log(`pipeline ${latencyMs} ms ${name}: bytes a row to Redis ${((net.input - before.net.input) / rows).toFixed(0)}, from Redis ${((net.output - before.net.output) / rows).toFixed(0)}`);
      const served = SandboxStatsSchema.parse(await (await fetch(`${sandbox.url}/_sandbox/stats`)).json());
      log(`pipeline ${latencyMs} ms ${name}: the sandbox answered ${served.requests / rows} requests a row; ${timeline(started, status.finishedAt, served)}`);
      if (status.succeeded !== rows) log(`warning: ${status.succeeded} of ${rows} rows succeeded: ${JSON.stringify(status.counts)}`);
      sides.push({ rowsPerSecond: rows / seconds, cpuUs: parts.worker + parts.import + parts.redis, parts, redisCalls });
    }
    return sides;
  } finally {
    worker.child.kill('SIGTERM');
    await worker.exited;
    await bench.close();
    await sandbox.close();
  }
}

/** A redis-server of the bench's own (no persistence), so only this run's work counts in its CPU. */
interface OwnRedis {
  url: string;
  pid: number | undefined;
  /** Commands Redis has run (INFO commandstats: every command, those inside scripts included). */
  commands(): Promise<number>;
  /** INFO commandstats by command: calls, and µs spent (a script's own commands counted in both it and them). */
  byCommand(): Promise<Map<string, { calls: number; usec: number }>>;
  /** Bytes Redis has read from and written to its clients (INFO stats). */
  netBytes(): Promise<{ input: number; output: number }>;
  /** Turns Redis's slow log on for every command (true), or reads it as the time per script and command, and turns it back off. */
  slowlog(on: boolean): Promise<string>;
  close(): Promise<void>;
}

async function startRedis(): Promise<OwnRedis> {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `redis://127.0.0.1:${port}`;
  const client = new Redis(url, { lazyConnect: true, retryStrategy: () => 50, maxRetriesPerRequest: null });
  // Refused connections while it starts are retried below.
  client.on('error', () => undefined);
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await client.connect();
      await client.ping();
      break;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      client.disconnect();
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    url,
    pid: child.pid,
    async commands() {
      const info = await client.info('commandstats');
      let calls = 0;
      for (const match of info.matchAll(/calls=(\d+)/g)) calls += Number(match[1]);
      return calls;
    },
    async netBytes() {
      const info = await client.info('stats');
      const read = (name: string): number => Number(new RegExp(`${name}:(\\d+)`).exec(info)?.[1] ?? NaN);
      return { input: read('total_net_input_bytes'), output: read('total_net_output_bytes') };
    },
    async slowlog(on: boolean) {
      if (on) {
        await client.config('SET', 'slowlog-log-slower-than', '0');
        await client.config('SET', 'slowlog-max-len', '2000000');
        await client.slowlog('RESET');
        return '';
      }
      const entries = (await client.slowlog('GET', -1)) as Array<[number, number, number, string[]]>;
      const by = new Map<string, { n: number; us: number }>();
      for (const [, , us, args] of entries) {
        const cmd = String(args[0]).toLowerCase();
        const key = cmd === 'evalsha' || cmd === 'eval' ? `${cmd} ${String(args[1]).slice(0, 8)} ${String(args[3] ?? '').replace(/[0-9a-f]{8}-[0-9a-f-]+|subsync-bench-[0-9a-f]+/g, '*').slice(0, 60)}` : cmd;
        const s = by.get(key) ?? { n: 0, us: 0 };
        s.n++;
        s.us += us;
        by.set(key, s);
      }
      await client.config('SET', 'slowlog-log-slower-than', '10000');
      return [...by].sort((a, b) => b[1].us - a[1].us).slice(0, 25).map(([k, v]) => `\n   ${k}: ${v.n} calls, ${v.us} µs`).join('');
    },
    async byCommand() {
      const info = await client.info('commandstats');
      const out = new Map<string, { calls: number; usec: number }>();
      for (const match of info.matchAll(/cmdstat_([^:]+):calls=(\d+),usec=(\d+)/g)) out.set(match[1] as string, { calls: Number(match[2]), usec: Number(match[3]) });
      return out;
    },
    async close() {
      client.disconnect();
      child.kill('SIGTERM');
      await exited;
    },
  };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

/** `uptime`'s load averages, for the table's header: the machine is shared. */
export async function loadAverage(): Promise<string> {
  const text = await readFile('/proc/loadavg', 'utf8').catch(() => '');
  return text.split(' ').slice(0, 3).join(' ');
}

/** CPU of a live process so far, in ms, its main thread's and the others' (V8's compiler and GC threads, libuv's) (Linux /proc). */
async function threadCpu(pid: number | undefined): Promise<Map<string, number>> {
  const sums = new Map<string, number>();
  for (const tid of await readdir(`/proc/${pid}/task`)) {
    const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
    if (!stat) continue;
    const name = tid === String(pid) ? 'main' : 'other threads';
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ms = ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
    sums.set(name, (sums.get(name) ?? 0) + ms);
  }
  return sums;
}
