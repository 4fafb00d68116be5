/**
 * The fault test: exactly once under faults, on a service that already holds
 * a realistic base of 100,000 customers (whose index subsync built before,
 * as a nightly export or `subsync index refresh` does). Three `subsync
 * worker` processes import 2,000 sign-ups and 2,000 customers against the
 * sandbox with 5% 5xx before applying, 2% 5xx after applying, 3%
 * commit-then-drop, a rate limit and 2% of the card requests refused with a
 * 500 whose words quote the card number, plain and dotted, and the CVC (the
 * echoCardData fault), while one worker is SIGKILLed every few seconds and
 * replaced, and Redis (AOF, `appendfsync everysec`) dies once in a host
 * crash: its AOF cut back to its last fsync, it comes back without the last
 * 100–1000 ms of acknowledged writes (bench/lostWrites.ts). Then: every row has exactly one outcome, the sandbox
 * holds exactly one customer per valid row and no identity twice, no row
 * needs review, the requests per row stay near one, and no card number or
 * CVC from the input is in Redis (an RDB dump and a logical scan), the logs,
 * or any file subsync wrote. One line of figures is printed.
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Writable } from 'node:stream';
import { parse } from 'csv-parse/sync';
import { afterAll, expect, it } from 'vitest';
import { z } from 'zod';
import { createApiClient } from '../../src/api/client.js';
import { loadConfig, type Config } from '../../src/config.js';
import { refreshFull } from '../../src/customers/refresh.js';
import { importFile } from '../../src/import/producer.js';
import { batchJobId, batchOf, batchRowsOf, rowJobId } from '../../src/queue/queues.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { createLogger } from '../../src/log.js';
import { openRuntime, type Runtime } from '../../src/runtime.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/server.js';
import { killAll, subsync, waitForOutput, type Run } from '../support/cli.js';
import { redisText, until } from '../support/pipeline.js';
import { lossRedis, type LossRedis } from '../../bench/lostWrites.js';

/**
 * The host crash of Redis beside the worker kills: on by default (CI's run); CHAOS_REDIS_LOSS=0 leaves it
 * out (to tell a failure of the kills and faults alone from one of the loss). Each kind of loss alone is
 * tested in test/store/lostWrites.test.ts.
 */
const REDIS_LOSS = process.env.CHAOS_REDIS_LOSS !== '0';

const ROWS = 2_000;
const INVALID = 10;
const WORKERS = 3;
const KILL_EVERY_MS = 2_500;
const MAX_KILLS = 12;
/** The customers the service holds before the imports. */
const BASE = 100_000;

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  await killAll();
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/**
 * For a run that created a row twice or missed one: each such row's ledger entry and its jobs' state, and every
 * log line kept in a file beside (the mechanism is read from them; they hold no card data, as the test checks).
 */
async function tellWhatWentWrong(input: {
  runtime: Runtime;
  sandbox: Sandbox;
  createdAtLoss: { begin: number; end: number; back: number; handled: number };
  ids: string[];
  held: Map<string, number>;
  tag: string;
  logs: string[];
}): Promise<void> {
  const { runtime, ids, held, tag, createdAtLoss } = input;
  // Each copy's place in the service's creation order, against the loss: before it, in its window, while Redis was down, after.
  const all = input.sandbox.store.customers();
  const first = Number(all[0]?.CustomerID ?? 0);
  const when = (customerId: string): string => {
    const at = Number(customerId) - first;
    return `${customerId} (${at < createdAtLoss.begin ? 'before the loss' : at < createdAtLoss.end ? 'in its window' : at < createdAtLoss.back ? 'while Redis was down' : at < createdAtLoss.handled ? 'after, before the rollback was handled' : 'after the rollback was handled'})`;
  };
  const copies = new Map<string, string[]>();
  for (const c of all) copies.set(`${c.FirstName}|${c.LastName}`, [...(copies.get(`${c.FirstName}|${c.LastName}`) ?? []), when(c.CustomerID)]);
  for (const [index, prefix, last] of [[0, 'Cu', 'Kc'], [1, 'Su', 'Ks']] as const) {
    for (let i = 1; i <= ROWS; i++) {
      const n = held.get(`${prefix}${i}|${last}${i}z${tag}`) ?? 0;
      if (n === 1) continue;
      const id = ids[index] ?? '';
      const entry = await runtime.store.getRow(id, i);
      const record = await runtime.store.getImport(id);
      const jobs = await Promise.all([batchJobId(id, batchOf(i, batchRowsOf(record ?? {}))), rowJobId(id, i)].map(async (jobId) => {
        const job = await runtime.queues.rows.getJob(jobId);
        return job ? { jobId, state: await job.getState(), attemptsMade: job.attemptsMade, failedReason: job.failedReason } : { jobId, state: 'gone' };
      }));
      console.log(`chaos: ${prefix}${i} held ${n} times: ${(copies.get(`${prefix}${i}|${last}${i}z${tag}`) ?? []).join(', ')}; ledger ${JSON.stringify(entry)}; jobs ${JSON.stringify(jobs)}`);
    }
  }
  const file = path.join(os.tmpdir(), `subsync-chaos-${tag}.log`);
  await writeFile(file, input.logs.join('\n'));
  console.log(`chaos: the logs are in ${file}`);
}

/** A random American Express number (15 digits passing Luhn): its CVC has the 4 digits the scan needs to tell it from anything else. */
function cardNumber(): string {
  const body = `37${Array.from({ length: 12 }, () => randomInt(10)).join('')}`;
  let sum = 0;
  for (let i = 0; i < body.length; i++) {
    let d = Number(body[body.length - 1 - i]);
    if (i % 2 === 0) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return `${body}${(10 - (sum % 10)) % 10}`;
}

it('every row settles exactly once under faults and worker kills, and card data stays out of everything written', async () => {
  const tag = randomBytes(3).toString('hex');
  const started = Date.now();
  // Where the time goes, for a run that comes near the three minutes.
  const phase = (what: string): void => console.log(`chaos: ${what} at ${((Date.now() - started) / 1000).toFixed(1)} s`);
  const redisDir = await mkdtemp(path.join(os.tmpdir(), 'subsync-chaos-redis-'));
  cleanups.push(() => rm(redisDir, { recursive: true, force: true }));
  // Uncompressed snapshots (the dump scanned below): a card number would show in them.
  const redis: LossRedis = await lossRedis('aof-crash', redisDir, ['--rdbcompression', 'no']);
  cleanups.push(() => redis.close());
  const redisPort = Number(new URL(redis.url).port);
  const sandbox: Sandbox = await startSandbox({ port: 0, seed: false, seedCustomers: BASE });
  cleanups.push(() => sandbox.close());
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'subsync-chaos-'));
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const cardKeyHex = randomBytes(32).toString('hex');

  // The input: unique names, distinct card numbers and CVCs, a few invalid rows in each file.
  const secrets = new Set<string>();
  const cvcs = new Set<string>();
  const customers = ['FirstName,LastName,EmailAddress,City'];
  const signups = [
    'Customer.FirstName,Customer.LastName,Customer.EmailAddress,CreditCardInfo.AccountNumber,CreditCardInfo.CVCode,CreditCardInfo.ExpirationDate,Subscription.OfferCode',
  ];
  for (let i = 1; i <= ROWS + INVALID; i++) {
    const bad = i > ROWS;
    customers.push(`Cu${i},Kc${i}z${tag},${bad ? 'not-an-email' : `cu${i}@example.com`},"Lyon, FR"`);
    const card = cardNumber();
    // 7000-9999: no row number, expiry, id or count of this test looks like one.
    const cvc = String(randomInt(7000, 10_000));
    secrets.add(card);
    cvcs.add(cvc);
    signups.push(`Su${i},Ks${i}z${tag},su${i}@example.com,${bad ? `${card.slice(0, -1)}${(Number(card.at(-1)) + 1) % 10}` : card},${cvc},1230,STREAM-PLUS`);
  }
  const customersFile = path.join(dataDir, 'chaos-customers.csv');
  const signupsFile = path.join(dataDir, 'chaos-signups.csv');
  await writeFile(customersFile, `${customers.join('\n')}\n`);
  await writeFile(signupsFile, `${signups.join('\n')}\n`);

  const env: NodeJS.ProcessEnv = {
    REDIS_URL: redis.url,
    SUBSYNC_QUEUE_PREFIX: 'chaos',
    SUBSYNC_API_URL: sandbox.url,
    SUBSYNC_DATA_DIR: dataDir,
    SUBSYNC_CARD_KEY: cardKeyHex,
    SUBSYNC_CONCURRENCY: '16',
    // A short lock, so a killed worker's rows are taken over within seconds.
    SUBSYNC_JOB_LOCK_MS: '6000',
    SUBSYNC_HTTP_TIMEOUT_MS: '2000',
    SUBSYNC_LOG_LEVEL: 'info',
  };
  const config: Config = { ...loadConfig(env), logLevel: 'info' };
  let producerLog = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      producerLog += chunk.toString('utf8');
      done();
    },
  });
  const runtime: Runtime = await openRuntime(config, createLogger({ level: 'info', destination: sink }));
  cleanups.push(() => runtime.close());

  // The index of the base, built before the imports (what the nightly export or `subsync index refresh` leaves).
  const api = createApiClient({ baseUrl: sandbox.url });
  await refreshFull({ api, budget: { block: async () => undefined }, index: runtime.customers, redis: runtime.redis, prefix: 'chaos' }).finally(() => api.close());
  sandbox.resetStats();
  phase('index of the base built');
  // The rate limit sits below what three workers ask for on any machine, so 429s always happen.
  sandbox.setFaults({ errorRate: 0.05, errorAfterApplyRate: 0.02, dropAfterCommitRate: 0.03, rateLimit: 150, echoCardData: 0.02, echoCardDataStatus: 500 });

  // Three workers, every log line kept for the card scan.
  const allWorkers: Run[] = [];
  const live: Run[] = [];
  const spawnWorker = async (): Promise<void> => {
    const worker = subsync(['worker'], env);
    allWorkers.push(worker);
    live.push(worker);
    await waitForOutput(worker, /worker running/);
  };
  await Promise.all(Array.from({ length: WORKERS }, spawnWorker));

  const deps = { store: runtime.store, queues: runtime.queues, keyring: runtime.keyring, logger: runtime.logger, journal: runtime.journal };
  const [customersImport, signupsImport] = await Promise.all([importFile({ file: customersFile }, deps), importFile({ file: signupsFile }, deps)]);
  const ids = [customersImport.importId, signupsImport.importId];
  phase('both files enqueued');

  // Kill one worker every few seconds and start a replacement, while rows are in flight; and once, when
  // most rows have settled (so the read-backs it causes stay few), a host crash of Redis.
  let kills = 0;
  let lossMs: number | undefined;
  // The rollback counter when the loss began and when Redis died: marks or settles in between were lost.
  let lostCounts = 0;
  // The customers the service held when the loss began, when Redis died, and when it was back (they are numbered in creation order).
  const createdAtLoss = { begin: 0, end: 0, back: 0, handled: 0 };
  const finished = async (): Promise<ImportStatus[] | undefined> => {
    const statuses = await Promise.all(ids.map((id) => importStatus(runtime.store, id)));
    return statuses.every((s) => s?.finished) ? (statuses as ImportStatus[]) : undefined;
  };
  while (kills < MAX_KILLS && !(await finished())) {
    await new Promise((resolve) => setTimeout(resolve, KILL_EVERY_MS));
    const settled = (await Promise.all(ids.map((id) => runtime.store.counts(id)))).reduce((n, c) => n + c.settled, 0);
    if (settled >= 2 * (ROWS + INVALID)) break;
    if (REDIS_LOSS && lossMs === undefined && (settled >= 1.2 * (ROWS + INVALID) || kills >= MAX_KILLS - 2)) {
      const seq = async (): Promise<number> => Number((await runtime.redis.get(runtime.store.keys.seq)) ?? 0);
      // The loss begins while marks and settles flow, and lasts a random 100–1000 ms, longer when none came in it
      // (the fleet waits out 429s and a kill's takeover in bursts): until some did, 1000 ms at most.
      await until(async () => {
        const at = await seq();
        await new Promise((resolve) => setTimeout(resolve, 50));
        return (await seq()) > at ? true : undefined;
      }, 'marks and settles to flow', 10_000, 0).catch(() => undefined);
      await redis.beginLoss();
      createdAtLoss.begin = sandbox.store.customerCount();
      const began = Date.now();
      const before = await seq();
      await new Promise((resolve) => setTimeout(resolve, randomInt(100, 1000)));
      while (Date.now() - began < 1000 && (await seq()) === before) await new Promise((resolve) => setTimeout(resolve, 20));
      lostCounts = (await seq()) - before;
      lossMs = Date.now() - began;
      createdAtLoss.end = sandbox.store.customerCount();
      await redis.completeLoss();
      createdAtLoss.back = sandbox.store.customerCount();
      // When the first worker has handled the rollback (its error line is written once the imports are in read-back mode).
      void until(async () => (allWorkers.some((w) => /Redis lost acknowledged writes/.test(w.stderr() + w.stdout())) ? true : undefined), 'the rollback handled', 30_000, 20)
        .then(() => (createdAtLoss.handled = sandbox.store.customerCount()))
        .catch(() => undefined);
      phase(`Redis back without its last ${lossMs} ms`);
    }
    const victim = live.splice(randomInt(live.length), 1)[0];
    victim?.child.kill('SIGKILL');
    kills++;
    await spawnWorker();
  }
  let lastTold = Date.now();
  let idleSince: number | undefined;
  let promoted = 0;
  const statuses = await until(
    async () => {
      const done = await finished();
      // Once the faults and kills are over, what is left is the odd row job waiting out a backoff that
      // grows to minutes (4 s, 12 s, 36 s, 108 s, …): after 10 s with nothing else to run, it is taken
      // now, as an operator's "retry now" would (the schedule itself is tested in test/backoff.test.ts).
      if (!done) {
        const left = await runtime.queues.rows.getJobCounts('waiting', 'active', 'prioritized', 'delayed');
        const idle = (left.waiting ?? 0) + (left.active ?? 0) + (left.prioritized ?? 0) === 0 && (left.delayed ?? 0) > 0;
        idleSince = idle ? (idleSince ?? Date.now()) : undefined;
        if (idleSince !== undefined && Date.now() - idleSince > 10_000) {
          promoted += left.delayed ?? 0;
          await runtime.queues.rows.promoteJobs();
          idleSince = undefined;
        }
      }
      if (!done && Date.now() - lastTold > 15_000) {
        lastTold = Date.now();
        const counts = await Promise.all(ids.map((id) => runtime.store.counts(id)));
        const jobs = await runtime.queues.rows.getJobCounts('waiting', 'active', 'delayed', 'failed', 'prioritized');
        phase(`waiting: settled ${counts.map((c) => c.settled).join(' + ')}, row jobs ${JSON.stringify(jobs)}`);
      }
      return done;
    },
    'both imports to settle',
    150_000,
    200,
  );
  phase(`both imports finished${promoted > 0 ? ` (${promoted} row job(s) taken before their backoff ended)` : ''}`);

  // Every row has exactly one outcome.
  const results = await Promise.all(
    statuses.map(async (s) =>
      z.array(z.record(z.string(), z.string())).parse(parse(await readFile(path.join(s.resultsDir ?? '', 'results.csv'), 'utf8'), { columns: true, bom: true })),
    ),
  );
  for (const rows of results) expect(rows.map((r) => Number(r._row))).toEqual(Array.from({ length: ROWS + INVALID }, (_, i) => i + 1));

  // The sandbox holds exactly one customer per valid row.
  const held = new Map<string, number>();
  for (const c of sandbox.store.customers()) held.set(`${c.FirstName}|${c.LastName}`, (held.get(`${c.FirstName}|${c.LastName}`) ?? 0) + 1);
  let duplicates = 0;
  let missing = 0;
  for (let i = 1; i <= ROWS; i++) {
    for (const key of [`Cu${i}|Kc${i}z${tag}`, `Su${i}|Ks${i}z${tag}`]) {
      const n = held.get(key) ?? 0;
      if (n === 0) missing++;
      if (n > 1) duplicates += n - 1;
    }
  }
  const invalidHeld = [...held.keys()].filter((k) => Number(/^\D+(\d+)\|/.exec(k)?.[1]) > ROWS).length;
  if (duplicates + missing > 0) await tellWhatWentWrong({ runtime, sandbox, createdAtLoss, ids, held, tag, logs: [producerLog, ...allWorkers.map((w, i) => `--- worker ${i + 1}\n${w.stderr()}${w.stdout()}`)] });

  const all = results.flat();
  // The valid rows that did not succeed, if any, with what their outcome says (for a failing run).
  const notSucceeded = all.filter((r) => Number(r._row) <= ROWS && !['created', 'signed-up', 'reconciled'].includes(r._status ?? ''));
  if (notSucceeded.length > 0) console.log(`chaos: rows that did not succeed: ${JSON.stringify(notSucceeded.map((r) => ({ row: r._row, status: r._status, error: r._error })))}`);
  const reviewRows = all.filter((r) => r._status === 'needs-review');
  const reconciled = all.filter((r) => r._status === 'reconciled').length;

  // Card data: an RDB dump, a logical scan of every key, the logs, every file written.
  const rdb = path.join(dataDir, 'dump-for-scan.rdb');
  await promisify(execFile)('redis-cli', ['-p', String(redisPort), '--rdb', rdb]);
  const rdbText = (await readFile(rdb)).toString('latin1');
  await rm(rdb);
  const written: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else if (full !== customersFile && full !== signupsFile) written.push(await readFile(full, 'utf8'));
    }
  };
  await walk(dataDir);
  const texts = [rdbText, await redisText(runtime.redis, 'chaos'), producerLog, ...allWorkers.map((w) => w.stderr() + w.stdout()), ...written];
  const hitsIn = (text: string): number => {
    let hits = 0;
    // A card number in any form: digits with separators between them (a JSON log line's \t too) joined first.
    const joined = text.replace(/(\d)(?:[\s./_-]|\\[tn]){1,3}(?=\d)/g, '$1');
    for (const run of joined.match(/\d{15,}/g) ?? []) for (let i = 0; i + 15 <= run.length; i++) if (secrets.has(run.slice(i, i + 15))) hits++;
    // Each CVC in each shape it could be written in, counted once: one pass over the text per shape (a scan per
    // CVC of megabytes of logs took most of a minute).
    const found = new Set<string>();
    const shapes: Array<[string, RegExp]> = [['quoted', /"(\d{4})"/g], ['cell', /,(\d{4})(?=,)/g], ['last cell', /,(\d{4})(?=\n)/g], ['cvc', /cvc (\d{4})/g]];
    for (const [shape, pattern] of shapes) for (const match of text.matchAll(pattern)) if (cvcs.has(match[1] ?? '')) found.add(`${shape} ${match[1]}`);
    return hits + found.size;
  };
  // The scan finds what it looks for: every card number and CVC is in the input file itself.
  // (each valid row's card number, and each distinct CVC once: the invalid rows' cards fail Luhn).
  expect(hitsIn(await readFile(signupsFile, 'utf8'))).toBe(ROWS + cvcs.size);
  const cardHits = texts.reduce((sum, text) => sum + hitsIn(text), 0);

  // Card rows whose sealed card data was lost with their jobs, read again from the file (src/import/cardCells.ts).
  let cardsReread = 0;
  for (const line of allWorkers.flatMap((w) => (w.stderr() + w.stdout()).split('\n'))) {
    if (line.includes('read again from the file and sealed')) cardsReread += Number(/"found":(\d+)/.exec(line)?.[1] ?? 0);
  }
  const stats = sandbox.stats();
  const identitiesTwice = sandbox.store.duplicateIdentities().length;
  // Every request the service saw during the imports (429s and faults included), per valid row.
  const perRow = stats.requests / (2 * ROWS);
  console.log(
    `chaos: base ${BASE}, rows ${all.length}, kills ${kills}, Redis loss ${lossMs ?? 'none'} ms (${lostCounts} marks and settles lost), faults 5xx-before ${stats.faults.error5xx} 5xx-after ${stats.faults.error5xxAfterApply} ` +
      `dropped ${stats.faults.droppedAfterCommit} 429 ${stats.faults.rateLimited} card-echoing ${stats.faults.echoedCardData}, reconciled ${reconciled}, card data read again ${cardsReread}, needs-review ${reviewRows.length}, ` +
      `duplicates ${duplicates}, identities twice ${identitiesTwice}, missing ${missing}, requests ${stats.requests} (${perRow.toFixed(3)} a row: ` +
      `${JSON.stringify(stats.byEndpoint)}), card-data hits ${cardHits}`,
  );

  expect(kills).toBeGreaterThan(0);
  // The Redis loss happened, and when it took marks or settles with it, the operator was told (a window
  // without any is no rollback of subsync's: nothing to detect).
  if (REDIS_LOSS) expect(lossMs).toBeDefined();
  const told = allWorkers.map((w) => w.stderr() + w.stdout()).join('\n') + producerLog;
  if (lostCounts > 0) expect(told).toMatch(/Redis lost acknowledged writes/);
  expect(stats.faults.error5xx * stats.faults.error5xxAfterApply * stats.faults.droppedAfterCommit * stats.faults.rateLimited * stats.faults.echoedCardData).toBeGreaterThan(0);
  expect(duplicates).toBe(0);
  expect(identitiesTwice).toBe(0);
  expect(missing).toBe(0);
  expect(invalidHeld).toBe(0);
  for (const row of reviewRows) expect(row._error, `row ${row._row}`).toMatch(/candidates: \d+/);
  expect(reviewRows).toEqual([]);
  expect(perRow).toBeLessThanOrEqual(1.3);
  expect(cardHits).toBe(0);
  for (const s of statuses) expect(s.counts.invalid).toBe(INVALID);
});
