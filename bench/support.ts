/**
 * What every measurement of `npm run bench` shares: a table row, a fresh
 * runtime on its own Redis key prefix (removed after), a concurrent loop, a
 * spawned `subsync` process with its peak RSS.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { loadConfig, type Config } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { deleteKeysWithPrefix } from '../src/redis/redis.js';
import { openRuntime, type Runtime } from '../src/runtime.js';
import { importStatus, type ImportStatus } from '../src/import/status.js';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
/** What `bin/subsync.js` runs: the bundled CLI. */
export const cliJs = path.join(root, 'dist', 'bundle', 'cli.js');

/** One line of the table: a figure, subsync's value, the baseline's, and a note (sizes, targets). */
export interface BenchRow {
  figure: string;
  subsync: number | string;
  baseline: number | string;
  /** Unit or baseline label. */
  baselineLabel: string;
  note: string;
}

/** The middle value (the upper of the two middle ones for an even count); 0 for none. */
export const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
};

export const fmt = (value: number | string): string => (typeof value === 'number' ? (Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2)) : value);
export const ratio = (a: number | string, b: number | string): string => (typeof a === 'number' && typeof b === 'number' && b !== 0 ? (a / b).toFixed(2) : '—');

/** A runtime on a fresh key prefix and data dir; `close` removes both. */
export interface BenchRuntime {
  runtime: Runtime;
  prefix: string;
  dataDir: string;
  env: NodeJS.ProcessEnv;
  close(): Promise<void>;
}

export async function openBenchRuntime(config: Partial<Config> = {}): Promise<BenchRuntime> {
  const prefix = `subsync-bench-${randomUUID().slice(0, 8)}`;
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'subsync-bench-'));
  const full: Config = { ...loadConfig({}), redisUrl: REDIS_URL, queuePrefix: prefix, dataDir, logLevel: 'error', ...config };
  const runtime = await openRuntime(full, createLogger({ level: full.logLevel, destination: process.stderr }));
  // The benches measure speed on whatever Redis they are given, often one that persists nothing (the
  // machine's, or one of their own): the workers they spawn are told to run on it anyway.
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, REDIS_URL: full.redisUrl, SUBSYNC_QUEUE_PREFIX: prefix, SUBSYNC_DATA_DIR: dataDir, SUBSYNC_LOG_LEVEL: 'warn', SUBSYNC_REDIS_ACCEPT_LOSS: 'true' };
  return {
    runtime,
    prefix,
    dataDir,
    env,
    async close() {
      await runtime.close();
      await deleteKeys(prefix, full.redisUrl);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export async function deleteKeys(prefix: string, redisUrl = REDIS_URL): Promise<void> {
  const redis = new Redis(redisUrl);
  try {
    await deleteKeysWithPrefix(redis, prefix);
  } finally {
    await redis.quit();
  }
}

/** Runs `task(i)` for i in [0, count) with `concurrency` in flight; returns seconds taken. */
export async function runConcurrent(count: number, concurrency: number, task: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) await task(next++);
    }),
  );
  return (performance.now() - started) / 1000;
}

/** Polls the import until its results are written (`finished`); throws after `timeoutMs`. */
export async function waitFinished(runtime: Runtime, importId: string, timeoutMs: number, pollMs = 50): Promise<ImportStatus> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await importStatus(runtime.store, importId);
    if (status?.finished) return status;
    if (Date.now() > deadline) throw new Error(`import ${importId} not finished after ${timeoutMs} ms: ${JSON.stringify(status?.counts)} settled ${status?.settledRows}/${status?.total}`);
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

/** A spawned `node dist/bundle/cli.js ARGS`, with output collected. */
export interface Spawned {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

/** `entry`: another build of the CLI to run (the fleet-start step's unbundled baseline). */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv, options: { timeV?: boolean; nodeArgs?: string[]; entry?: string } = {}): Spawned {
  const node = [...(options.nodeArgs ?? []), options.entry ?? cliJs, ...args];
  const child = options.timeV ? spawn('/usr/bin/time', ['-v', process.execPath, ...node], { cwd: root, env }) : spawn(process.execPath, node, { cwd: root, env });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr?.setEncoding('utf8').on('data', (c: string) => (err += c));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** Peak RSS (VmHWM) of a live process in MB, or undefined. */
export async function peakRssMb(pid: number | undefined): Promise<number | undefined> {
  if (pid === undefined) return undefined;
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const match = /VmHWM:\s+(\d+) kB/.exec(status);
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** `Maximum resident set size (kbytes)` of `/usr/bin/time -v` output, in MB. */
export function timeVRssMb(stderr: string): number | undefined {
  const match = /Maximum resident set size \(kbytes\): (\d+)/.exec(stderr);
  return match ? Number(match[1]) / 1024 : undefined;
}

/** used_memory once Redis has freed what earlier UNLINKs handed to its background thread. */
export async function usedMemory(redis: Redis): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const pending = /lazyfree_pending_objects:(\d+)/.exec(await redis.info('memory'));
    if (!pending || pending[1] === '0') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const info = await redis.info('memory');
  const match = /used_memory:(\d+)/.exec(info);
  return match ? Number(match[1]) : NaN;
}

/** CPU time (user + system) a process has used, in ms, from /proc (Linux). */
export async function processCpuMs(pid: number | undefined): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** CPU time Redis has used, in ms (INFO cpu: user + system). */
export async function redisCpuMs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const seconds = (field: string): number => Number(new RegExp(`${field}:([\\d.]+)`).exec(info)?.[1] ?? NaN);
  return (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1000;
}

export const log = (line: string): void => {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
};

/** A `subsync sandbox` in its own process (as the real service would be), no seeds needed. */
export interface SpawnedSandbox {
  url: string;
  pid: number | undefined;
  close(): Promise<void>;
}

/**
 * Node's memory reducer is off in the sandbox's process. Its limiter stamps a
 * request when the sandbox's JavaScript gets to it; the reducer compacts the
 * sandbox's heap about 16 or 24 s after it starts, pausing it up to 30 ms,
 * and the requests that arrived meanwhile are then stamped at one instant. A
 * window starting there holds that backlog and a whole second after it: at
 * 195 requests a second, any pause past 25 ms counts 201, a 429 no pacing of
 * the clients can prevent. With it on, about one import in six of the rate
 * steps met a 429 while the workers' sends held at most 200 in any second;
 * with it off, one in 40 (docs/performance.md). BENCH_SANDBOX_NODE_ARGS
 * replaces the flags (empty: Node's defaults, the reducer on).
 */
const SANDBOX_NODE_ARGS = process.env.BENCH_SANDBOX_NODE_ARGS?.split(' ').filter(Boolean) ?? ['--no-memory-reducer'];

/**
 * A sandbox with a rate limit runs at a higher scheduling priority (nice -10)
 * than the fleet it counts. On one machine it waits for a core beside the
 * workers, the producer and Redis, most of all as an import starts; the
 * requests that arrive meanwhile are stamped when it gets one, and a sliding
 * second starting there counts them with a whole second after: a 429 the
 * wire did not earn (traced in docs/performance.md, "The sandbox's wait for
 * a core"). The real service does not share the clients' cores. Raising the
 * priority needs root (or CAP_SYS_NICE); without it the sandbox runs as
 * before, and the bench says so. BENCH_SANDBOX_NICE sets the niceness (0:
 * none).
 */
const SANDBOX_NICE = Number(process.env.BENCH_SANDBOX_NICE ?? -10);

export async function spawnSandbox(flags: string[] = [], env: NodeJS.ProcessEnv = { PATH: process.env.PATH, SUBSYNC_LOG_LEVEL: 'warn' }): Promise<SpawnedSandbox> {
  const sandbox = spawnCli(['sandbox', '--port', '0', ...flags], env, { nodeArgs: SANDBOX_NODE_ARGS });
  const url = await waitForLine(sandbox, /sandbox listening on (\S+)/, 20_000);
  if (flags.includes('--rate-limit') && SANDBOX_NICE !== 0 && sandbox.child.pid !== undefined) {
    try {
      os.setPriority(sandbox.child.pid, SANDBOX_NICE);
    } catch (error) {
      log(`the rate-limited sandbox runs at normal priority (${error instanceof Error ? error.message : String(error)}): a stall of it may count as a burst`);
    }
  }
  return {
    url,
    pid: sandbox.child.pid,
    async close() {
      sandbox.child.kill('SIGTERM');
      await sandbox.exited;
    },
  };
}

/** Waits until a spawned process prints a line matching `pattern`; returns its first group. */
export async function waitForLine(spawned: Spawned, pattern: RegExp, timeoutMs: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const match = pattern.exec(spawned.stdout());
    if (match) return match[1] ?? match[0];
    if (spawned.child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`no line matching ${pattern} from ${spawned.child.spawnargs.join(' ')}: ${spawned.stderr().slice(-500)}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}
