/**
 * A Redis that comes back without its last acknowledged writes, during an
 * import, as an operator's infrastructure would fail it; and what that did to
 * the promise: customers created twice (the sandbox's `/_sandbox/duplicates`,
 * over HTTP), rows that never got an outcome, what the import said.
 *
 * Each try: a sandbox, a redis-server of its own in a temp dir, two `subsync
 * worker` processes and `subsync import FILE --wait`, the file's rows at a
 * fixed fleet rate. At a random point of the import (a random share of the
 * rows settled) the loss begins: what Redis holds from then on is what it
 * will come back with; `windowMs` later it is killed (SIGKILL) and brought
 * back without what came in that window:
 *
 * - `aof-crash`: AOF with `appendfsync everysec`. A killed process loses
 *   nothing (the tail is in the page cache); a host crash or power loss loses
 *   what was written since the last fsync, up to about a second. Simulated:
 *   the size of the AOF's incremental file is taken when the loss begins (as
 *   if an fsync had just completed: Redis writes whole commands, so that size
 *   is a command boundary), Redis is SIGKILLed `windowMs` later, the file is
 *   cut back to that size, and Redis starts from it. Automatic rewrites are
 *   off, so the file taken is the file Redis appends to.
 * - `aof-always-crash`: the same with `appendfsync always`: every write is
 *   fsynced before it is acknowledged, so nothing is cut (the control case).
 * - `rdb`: snapshots only. `SAVE` when the loss begins, SIGKILL `windowMs`
 *   later, and Redis starts from that snapshot.
 * - `replica`: a replica that was behind is promoted. Clients reach Redis
 *   through a TCP proxy (as they would a Sentinel-managed or DNS name); when
 *   the loss begins the replica stops replicating (REPLICAOF NO ONE: it holds
 *   what it had received), `windowMs` later the primary is SIGKILLed and the
 *   proxy cuts every connection and sends new ones to the replica.
 *
 * `node dist/bench/lostWrites.js [case ...]` prints the table (cases:
 * aof-crash, aof-crash-signups, rdb, replica, aof-always-crash; LOSS_TRIES
 * tries each, default 3; LOSS_ROWS rows, default 3000; LOSS_RATE, default 150).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { createServer, connect, type Server, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { createImportStore, isSettled, type ImportStore } from '../src/store/importStore.js';
import { batchJobId, batchOf, batchRowsOf, openQueues, rowJobId } from '../src/queue/queues.js';
import { feedKeys } from '../src/queue/feeder.js';
import { startSandbox, type Sandbox } from '../src/sandbox/server.js';

// From bench/ (a test imports this file) or from dist/bench/ (node runs it).
const here = path.dirname(fileURLToPath(import.meta.url));
const root = existsSync(path.join(here, '..', 'package.json')) ? path.resolve(here, '..') : path.resolve(here, '..', '..');
const bin = path.join(root, 'bin', 'subsync.js');

export type LossKind = 'aof-crash' | 'aof-always-crash' | 'rdb' | 'replica';

/** A port nothing listens on. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One redis-server in a directory of its own, that can be killed and started again from what its files hold. */
export class RedisNode {
  private child: ChildProcessWithoutNullStreams | undefined;
  private output = '';
  constructor(
    readonly port: number,
    readonly dir: string,
    private readonly args: string[],
  ) {}

  static async start(dir: string, args: string[]): Promise<RedisNode> {
    await mkdir(dir, { recursive: true });
    const node = new RedisNode(await freePort(), dir, args);
    await node.start();
    return node;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(extra: string[] = []): Promise<void> {
    const proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--maxmemory-policy', 'noeviction', ...this.args, ...extra], { stdio: 'pipe' });
    this.child = proc;
    this.output = '';
    proc.stdout.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    const deadline = Date.now() + 20_000;
    while (!/Ready to accept connections/.test(this.output)) {
      if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`redis-server did not start:\n${this.output}`);
      await sleep(20);
    }
  }

  async kill(): Promise<void> {
    const proc = this.child;
    this.child = undefined;
    if (!proc || proc.exitCode !== null) return;
    proc.kill('SIGKILL');
    await once(proc, 'exit');
  }

  client(): Redis {
    const client = new Redis(this.url, { maxRetriesPerRequest: null, lazyConnect: false });
    client.on('error', () => undefined);
    return client;
  }

  /** The AOF file Redis appends to (Redis 7's multi-part AOF: the one incremental file, rewrites being off). */
  async aofTail(): Promise<string> {
    const dir = path.join(this.dir, 'appendonlydir');
    const incr = (await readdir(dir)).filter((f) => f.endsWith('.incr.aof')).sort();
    const last = incr.at(-1);
    if (!last) throw new Error(`no incremental AOF in ${dir}`);
    return path.join(dir, last);
  }
}

/** A TCP proxy: what clients connect to, sent on to one port, switched (every open connection cut) at a failover. */
export class FailoverProxy {
  private readonly sockets = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
    private target: number,
  ) {}

  static async start(target: number): Promise<FailoverProxy> {
    const port = await freePort();
    let proxy: FailoverProxy | undefined;
    const server = createServer((client) => proxy?.pipe(client));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    proxy = new FailoverProxy(server, port, target);
    return proxy;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  private pipe(client: Socket): void {
    const upstream = connect(this.target, '127.0.0.1');
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        this.sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  }

  /** New connections go to `port`; every open one is cut (its primary is gone). */
  switchTo(port: number): void {
    this.target = port;
    for (const s of this.sockets) s.destroy();
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The Redis of one try, and how it loses its last writes. */
export interface LossRedis {
  /** What subsync connects to. */
  url: string;
  /** The loss begins: from now on, what Redis receives is what it will lose. */
  beginLoss(): Promise<void>;
  /** Kills Redis and brings it back without what came since beginLoss. */
  completeLoss(): Promise<void>;
  close(): Promise<void>;
}

/** `extra`: more redis-server arguments for every node. */
export async function lossRedis(kind: LossKind, dir: string, extra: string[] = []): Promise<LossRedis> {
  if (kind === 'aof-crash' || kind === 'aof-always-crash') {
    const fsync = kind === 'aof-crash' ? 'everysec' : 'always';
    const node = await RedisNode.start(dir, ['--save', '', '--appendonly', 'yes', '--appendfsync', fsync, '--auto-aof-rewrite-percentage', '0', ...extra]);
    let file = '';
    let size = 0;
    return {
      url: node.url,
      async beginLoss() {
        file = await node.aofTail();
        size = (await stat(file)).size;
      },
      async completeLoss() {
        await node.kill();
        // With `always`, what was acknowledged was fsynced: the host crash takes nothing.
        if (kind === 'aof-crash') await truncate(file, size);
        await node.start();
      },
      close: () => node.kill(),
    };
  }
  if (kind === 'rdb') {
    // Snapshots on (what the start check sees), but never on their own during a try: the test takes the one it restores.
    const node = await RedisNode.start(dir, ['--save', '86400 1000000000', '--appendonly', 'no', '--dbfilename', 'dump.rdb', ...extra]);
    const admin = node.client();
    return {
      url: node.url,
      async beginLoss() {
        await admin.save();
      },
      async completeLoss() {
        await node.kill();
        await node.start();
      },
      async close() {
        admin.disconnect();
        await node.kill();
      },
    };
  }
  const primary = await RedisNode.start(path.join(dir, 'primary'), ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always', ...extra]);
  const replica = await RedisNode.start(path.join(dir, 'replica'), ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--replicaof', '127.0.0.1', String(primary.port), ...extra]);
  const replicaAdmin = replica.client();
  // In sync before anything is written.
  for (let i = 0; !/master_link_status:up/.test(await replicaAdmin.info('replication')); i++) {
    if (i > 500) throw new Error('the replica did not sync');
    await sleep(20);
  }
  const proxy = await FailoverProxy.start(primary.port);
  return {
    url: proxy.url,
    async beginLoss() {
      await replicaAdmin.replicaof('NO', 'ONE');
    },
    async completeLoss() {
      await primary.kill();
      proxy.switchTo(replica.port);
    },
    async close() {
      replicaAdmin.disconnect();
      await proxy.close();
      await primary.kill();
      await replica.kill();
    },
  };
}

/** A spawned `subsync`. */
interface Proc {
  child: ChildProcessWithoutNullStreams;
  out: () => string;
  exited: Promise<number | null>;
}

function subsync(args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, [bin, ...args], { cwd: root, env: { PATH: process.env.PATH, ...env } });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (out += c));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, out: () => out, exited };
}

export interface LossTryOptions {
  kind: LossKind;
  file: 'customers' | 'signups';
  rows?: number;
  /** SUBSYNC_RATE of the fleet. */
  rate?: number;
  workers?: number;
  /** How long the loss lasts before Redis dies (default random in [100, 1000) ms; a replica 250 ms). */
  windowMs?: number;
  /** The loss begins once this share of the rows has settled (default random in [0.2, 0.7)). */
  at?: number;
  /** With no row settled for this long after Redis is back, the try ends (default 45 s). */
  quietMs?: number;
  /** Extra environment for every subsync process (SUBSYNC_* settings). */
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
}

export interface LossTryResult {
  kind: LossKind;
  file: 'customers' | 'signups';
  rows: number;
  windowMs: number;
  /** Settled rows when the loss began. */
  settledAtLoss: number;
  /** Customers the service holds beyond one per identity. */
  duplicates: number;
  /** Identities held more than once (the sandbox's /_sandbox/duplicates count). */
  identitiesTwice: number;
  /** Rows of the file whose person the service does not hold. */
  missingAtService: number;
  /** Rows without an outcome in the ledger when the try ended. */
  noOutcome: number;
  /** Counts by status as Redis holds them at the end. */
  counts: Record<string, number>;
  /** `import --wait`'s exit code (null: it had not ended). */
  waitExit: number | null;
  /** What `import --wait` printed last. */
  waitSaid: string;
  /** Every worker's and the import's output, for what the operator was told. */
  output: string;
  /** The distinct notes of rows that did not succeed (at most 5). */
  notes: string[];
  /** The import was put in read-back mode (what `status` shows). */
  readBack: boolean;
  /** For the first batches holding rows without an outcome: their ledger entries, jobs and place in the feeder (empty when every row has one). */
  stuck: string[];
  seconds: number;
}

/**
 * What holds the first unsettled rows of an import (at most `limit` batches): each row's ledger entry,
 * its batch job's and own job's state, and whether the feeder still holds its batch.
 */
async function describeStuck(redis: Redis, store: ImportStore, importId: string, total: number, limit = 3): Promise<string[]> {
  // By batch: its first unsettled row, and up to three of its rows with their entries.
  const byBatch = new Map<number, { first: number; rows: string[] }>();
  const record = await store.getImport(importId);
  const batchRows = batchRowsOf(record ?? {});
  for await (const { row, entry } of store.rowsInOrder(importId, total)) {
    if (isSettled(entry.status)) continue;
    const block = batchOf(row, batchRows);
    let batch = byBatch.get(block);
    if (!batch) {
      if (byBatch.size >= limit) continue;
      byBatch.set(block, (batch = { first: row, rows: [] }));
    }
    if (batch.rows.length < 3) batch.rows.push(`${row} ${JSON.stringify(entry)}`);
  }
  if (byBatch.size === 0) return [];
  const queues = openQueues(redis, 'loss');
  const feed = feedKeys('loss');
  const jobState = async (id: string): Promise<string> => {
    const job = await queues.rows.getJob(id);
    if (!job) return 'none';
    const lock = await redis.exists(queues.rows.toKey(`${id}:lock`));
    return `${await job.getState()} (attempts ${job.attemptsMade}, started ${job.attemptsStarted}, stalled ${job.stalledCounter}, lock ${lock}, ${job.failedReason ?? 'no failure'})`;
  };
  const lines: string[] = [];
  try {
    for (const [block, { first, rows }] of byBatch) {
      const inBacklog = await redis.hexists(feed.batches(importId), String(block));
      const releasing = await redis.hexists(feed.releasing, `${importId}:${block}`);
      const released = await redis.sismember(feed.releasedBlocks(importId), String(block));
      lines.push(
        `batch ${block}: job ${await jobState(batchJobId(importId, block))}; row ${first}'s own job ${await jobState(rowJobId(importId, first))}; ` +
          `feeder backlog ${inBacklog}, releasing ${releasing}, released ${released}; rows ${rows.join(', ')}`,
      );
    }
  } finally {
    await queues.close();
  }
  return lines;
}

/** One try: import, lose Redis's last writes partway, wait for the end or for quiet, count. */
export async function lossTry(options: LossTryOptions): Promise<LossTryResult> {
  const started = Date.now();
  const rows = options.rows ?? 3000;
  const rate = options.rate ?? 150;
  const log = options.log ?? (() => undefined);
  const windowMs = options.windowMs ?? (options.kind === 'replica' ? 250 : randomInt(100, 1000));
  const at = options.at ?? 0.2 + Math.random() * 0.5;
  const quietMs = options.quietMs ?? 45_000;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-loss-'));
  const cleanups: Array<() => Promise<unknown>> = [() => rm(dir, { recursive: true, force: true })];
  const procs: Proc[] = [];
  try {
    const redis = await lossRedis(options.kind, path.join(dir, 'redis'));
    cleanups.push(() => redis.close());
    const sandbox: Sandbox = await startSandbox({ port: 0, seed: false });
    cleanups.push(() => sandbox.close());
    const tag = randomBytes(3).toString('hex');
    const file = path.join(dir, `${options.file}.csv`);
    const lines =
      options.file === 'customers'
        ? ['FirstName,LastName,EmailAddress'].concat(Array.from({ length: rows }, (_, i) => `Lw${i + 1},Kl${i + 1}z${tag},lw${i + 1}.${tag}@example.com`))
        : ['Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode'].concat(
            Array.from({ length: rows }, (_, i) => `Lw${i + 1},Kl${i + 1}z${tag},lw${i + 1}.${tag}@example.com,4111111111111111,123,1230,STREAM-PLUS`),
          );
    await writeFile(file, `${lines.join('\n')}\n`);
    const dataDir = path.join(dir, 'data');
    const env: NodeJS.ProcessEnv = {
      REDIS_URL: redis.url,
      SUBSYNC_QUEUE_PREFIX: 'loss',
      SUBSYNC_API_URL: sandbox.url,
      SUBSYNC_DATA_DIR: dataDir,
      SUBSYNC_CARD_KEY: 'cd'.repeat(32),
      SUBSYNC_RATE: String(rate),
      SUBSYNC_CONCURRENCY: '16',
      // A short lock, so a batch left active by the loss runs again within seconds, not a minute.
      SUBSYNC_JOB_LOCK_MS: '6000',
      SUBSYNC_HTTP_TIMEOUT_MS: '2000',
      SUBSYNC_LOG_LEVEL: 'info',
      ...options.env,
    };
    for (let i = 0; i < (options.workers ?? 2); i++) {
      const worker = subsync(['worker'], env);
      procs.push(worker);
      while (!/worker running/.test(worker.out())) {
        if (worker.child.exitCode !== null) throw new Error(`a worker exited: ${worker.out()}`);
        await sleep(50);
      }
    }
    const importRun = subsync(['import', file, '--wait', '--json'], env);
    procs.push(importRun);
    let importId: string | undefined;
    while (!importId) {
      importId = /"importId":\s*"([^"]+)"/.exec(importRun.out())?.[1] ?? /import id: (\S+)/.exec(importRun.out())?.[1];
      if (!importId && importRun.child.exitCode !== null) throw new Error(`import exited: ${importRun.out()}`);
      await sleep(50);
    }
    const watcher = new Redis(redis.url, { maxRetriesPerRequest: null });
    watcher.on('error', () => undefined);
    cleanups.push(async () => watcher.disconnect());
    const store = createImportStore(watcher, 'loss');
    const settledNow = async (): Promise<number> => (await store.counts(importId)).settled;

    let settledAtLoss = 0;
    for (;;) {
      settledAtLoss = await settledNow();
      if (settledAtLoss >= at * rows) break;
      if (importRun.child.exitCode !== null) throw new Error(`the import ended before the loss: ${importRun.out()}`);
      await sleep(20);
    }
    await redis.beginLoss();
    await sleep(windowMs);
    await redis.completeLoss();
    log(`${options.kind} ${options.file}: loss of ${windowMs} ms after ${settledAtLoss} rows settled`);

    // To the end, or until nothing has settled for quietMs.
    let last = -1;
    let lastChange = Date.now();
    for (;;) {
      if (importRun.child.exitCode !== null) break;
      const settled = await settledNow().catch(() => last);
      if (settled !== last) {
        last = settled;
        lastChange = Date.now();
      }
      if (Date.now() - lastChange > quietMs) break;
      await sleep(250);
    }
    // The import's end (its --wait returned); a moment for the results to be counted.
    const record = await store.getImport(importId);
    const counts = await store.counts(importId);
    const total = record?.total ?? rows;
    const dupes = (await (await fetch(`${sandbox.url}/_sandbox/duplicates`)).json()) as { count: number; identities: Array<{ CustomerIDs: string[] }> };
    const held = new Set(sandbox.store.customers().map((c) => c.LastName));
    let missingAtService = 0;
    for (let i = 1; i <= rows; i++) if (!held.has(`Kl${i}z${tag}`)) missingAtService++;
    const waitExit = importRun.child.exitCode;
    const notes = new Set<string>();
    for await (const { entry } of store.rowsWithStatus(importId, new Set(['failed', 'needs-review']))) if (notes.size < 5 && entry.note) notes.add(entry.note);
    const result: LossTryResult = {
      kind: options.kind,
      file: options.file,
      rows,
      windowMs,
      settledAtLoss,
      duplicates: dupes.identities.reduce((n, d) => n + d.CustomerIDs.length - 1, 0),
      identitiesTwice: dupes.count,
      missingAtService,
      noOutcome: total - counts.settled,
      counts: { ...counts.byStatus, settled: counts.settled },
      waitExit,
      waitSaid: importRun.out().trim().split('\n').slice(-3).join(' | ').slice(0, 400),
      output: procs.map((p) => p.out()).join('\n'),
      notes: [...notes],
      readBack: record?.readBack !== undefined,
      stuck: await describeStuck(watcher, store, importId, total),
      seconds: (Date.now() - started) / 1000,
    };
    return result;
  } finally {
    for (const p of procs) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGKILL');
        await p.exited;
      }
    }
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  }
}

const CASES: Record<string, Pick<LossTryOptions, 'kind' | 'file'>> = {
  'aof-crash': { kind: 'aof-crash', file: 'customers' },
  'aof-crash-signups': { kind: 'aof-crash', file: 'signups' },
  rdb: { kind: 'rdb', file: 'customers' },
  replica: { kind: 'replica', file: 'customers' },
  'aof-always-crash': { kind: 'aof-always-crash', file: 'customers' },
};

async function main(): Promise<void> {
  const names = process.argv.slice(2).length > 0 ? process.argv.slice(2) : Object.keys(CASES);
  const tries = Number(process.env.LOSS_TRIES ?? 3);
  const rows = Number(process.env.LOSS_ROWS ?? 3000);
  const rate = Number(process.env.LOSS_RATE ?? 150);
  console.log(`| case | loss window (ms) | created twice, per try | rows without an outcome, per try | people missing at the service, per try | import --wait exit, per try | operator told |`);
  console.log('|---|---|---|---|---|---|---|');
  for (const name of names) {
    const c = CASES[name];
    if (!c) throw new Error(`unknown case ${name}: ${Object.keys(CASES).join(', ')}`);
    const results: LossTryResult[] = [];
    for (let i = 0; i < tries; i++) {
      const r = await lossTry({ ...c, rows, rate, log: (line) => process.stderr.write(`${line}\n`) });
      process.stderr.write(`  ${name} try ${i + 1}: duplicates ${r.duplicates}, no outcome ${r.noOutcome}, missing at service ${r.missingAtService}, exit ${r.waitExit}, ${r.seconds.toFixed(0)} s; counts ${JSON.stringify(r.counts)}; notes: ${r.notes.join(' / ')}\n`);
      results.push(r);
    }
    const told = results.map((r) => (/lost acknowledged writes|rolled back|lost writes/i.test(r.output) ? 'yes' : 'no')).join(', ');
    console.log(
      `| ${name} | ${results.map((r) => r.windowMs).join(', ')} | ${results.map((r) => r.duplicates).join(', ')} | ${results.map((r) => r.noOutcome).join(', ')} | ${results.map((r) => r.missingAtService).join(', ')} | ${results.map((r) => String(r.waitExit)).join(', ')} | ${told} |`,
    );
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
