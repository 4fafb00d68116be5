/** Repeated failures are one log line per class and interval (src/failureLog.ts), in a unit and in a worker. */
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createFailureLog } from '../src/failureLog.js';
import { importFile } from '../src/import/producer.js';
import { createLogger } from '../src/log.js';
import { waitFinished } from './support/imports.js';
import { startPipeline, until, type Pipeline } from './support/pipeline.js';
import { startOwnRedis } from './support/redisServer.js';

interface Line {
  level: number;
  msg: string;
  place?: string;
  code?: string;
  repeats?: number;
  err?: { stack?: string };
}

function capture(level = 'debug') {
  let text = '';
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      text += chunk.toString();
      done();
    },
  });
  const lines = (): Line[] =>
    text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Line);
  return { logger: createLogger({ level, destination: stream }), lines };
}

/** As ioredis raises it (a ReplyError). */
const oom = (): Error => Object.assign(new Error("OOM command not allowed when used memory > 'maxmemory'."), { name: 'ReplyError' });
const refused = (): Error => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6390'), { code: 'ECONNREFUSED' });

describe('the failure log', () => {
  it('logs the first failure of a class once, its stack at debug only, then one line with the count per interval', () => {
    const { logger, lines } = capture();
    const failures = createFailureLog(logger, { timer: false });
    for (let i = 0; i < 1000; i++) failures.report('row attempt', oom());
    for (let i = 0; i < 500; i++) failures.report('redis connection', refused());

    const warns = lines().filter((l) => l.level === 40);
    expect(warns).toHaveLength(2);
    expect(warns[0]).toMatchObject({ place: 'row attempt', code: 'REDIS_OOM' });
    expect(warns[0]?.msg).toMatch(/^row attempt: Redis is out of memory .* rows wait in their queue and ledger, nothing is lost, .*maxmemory/);
    expect(warns[1]).toMatchObject({ place: 'redis connection', code: 'ECONNREFUSED' });
    // Stacks: one per class, at debug.
    const stacks = lines().filter((l) => l.err?.stack !== undefined);
    expect(stacks).toHaveLength(2);
    expect(stacks.every((l) => l.level === 20)).toBe(true);

    failures.flush();
    const counted = lines().filter((l) => l.repeats !== undefined);
    expect(counted.map((l) => [l.place, l.repeats])).toEqual([
      ['row attempt', 999],
      ['redis connection', 499],
    ]);
    // A quiet interval writes nothing, and the class is forgotten: its next occurrence is told afresh.
    const before = lines().length;
    failures.flush();
    expect(lines()).toHaveLength(before);
    failures.report('row attempt', oom());
    expect(lines().filter((l) => l.level === 40 && l.place === 'row attempt' && l.repeats === undefined)).toHaveLength(2);
    failures.close();
  });

  it('at info level writes no stack at all', () => {
    const { logger, lines } = capture('info');
    const failures = createFailureLog(logger, { timer: false });
    for (let i = 0; i < 100; i++) failures.report('row attempt', oom());
    failures.close();
    expect(lines()).toHaveLength(2);
    expect(JSON.stringify(lines())).not.toContain('"stack"');
  });
});

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

describe('a worker whose rows all fail alike', () => {
  it('writes one line for the class, not a line with a stack per row', async () => {
    pipeline = await startPipeline({ workers: false, seed: false, faults: { errorRate: 1 }, config: { logLevel: 'info' } });
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= 40; i++) lines.push(`Row${i},Flood,row${i}@example.com`);
    const { store, queues, keyring, logger } = pipeline.runtime;
    const result = await importFile({ file: await pipeline.file('flood.csv', `${lines.join('\n')}\n`), allowDuplicates: true }, { store, queues, keyring, logger });
    const p = pipeline;
    p.workers = (await import('../src/runtime.js')).startWorkers(p.runtime, { apiUrl: p.sandbox.url, concurrency: 8, backoff: { baseMs: 20, capMs: 100 } });
    // Every row has failed at least twice (in its batch, then in its own job).
    await until(async () => (p.sandbox.stats().faults.error5xx >= 80 ? true : undefined), '80 failed attempts');
    const logged = p
      .logs()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Line);
    const attempts = logged.filter((l) => l.place === 'row attempt');
    expect(attempts.length).toBeGreaterThanOrEqual(1);
    // The first line, and at most one count per 10 s interval while it repeats.
    expect(attempts.length).toBeLessThanOrEqual(3);
    expect(p.logs()).not.toContain('"stack"');
    p.sandbox.setFaults({ errorRate: 0 });
    // Every row still reaches an outcome (some may have used up their attempts meanwhile).
    const status = await waitFinished(p, result.importId);
    expect(status.settledRows).toBe(40);
    expect(status.counts.created + status.counts.failed).toBe(40);
    expect(p.sandbox.store.customers()).toHaveLength(status.counts.created);
  });
});

describe('Redis going away', () => {
  it('its connection errors are one line, not one per reconnect', async () => {
    const own = await startOwnRedis();
    try {
      pipeline = await startPipeline({ seed: false, config: { redisUrl: own.url, logLevel: 'info' } });
      const p = pipeline;
      let errors = 0;
      p.runtime.redis.on('error', () => errors++);
      await own.stop();
      // ioredis reconnects again and again, each failure an error event.
      await until(async () => (errors >= 5 ? true : undefined), 'five connection errors');
      const logged = p
        .logs()
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Line);
      const connection = logged.filter((l) => l.place === 'redis connection');
      expect(connection.length).toBeGreaterThanOrEqual(1);
      // Per class (a reset as Redis dies, then refused connections): the first, then at most a count per 10 s.
      const firsts = connection.filter((l) => l.repeats === undefined).map((l) => l.code);
      expect(firsts).toEqual([...new Set(firsts)]);
      expect(firsts).toContain('ECONNREFUSED');
      expect(connection.length).toBeLessThan(errors);
      expect(p.logs()).not.toContain('"stack"');
    } finally {
      // Closing waits for the workers, which wait for Redis.
      await own.restart();
      await pipeline?.close();
      pipeline = undefined;
      await own.stop();
    }
  });
});
