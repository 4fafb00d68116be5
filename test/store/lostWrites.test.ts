/**
 * Redis comes back without its last acknowledged writes in the middle of an
 * import, as an operator's infrastructure would fail it, on redis-server
 * processes of the test's own (bench/lostWrites.ts explains each simulation):
 *
 * - a host crash with AOF `appendfsync everysec`: the AOF is cut back to its
 *   size when the loss began (an fsync just done), Redis SIGKILLed a random
 *   100–1000 ms later and started from the cut file;
 * - an RDB snapshot restore: SAVE when the loss begins, SIGKILL later, Redis
 *   starts from that older dump;
 * - a replica that was behind promoted: it stops replicating when the loss
 *   begins, the primary dies 250 ms later, and clients (through a proxy, as
 *   through a Sentinel or DNS name) reach the replica.
 *
 * For creates and for sign-ups, with two `subsync worker` processes and
 * `subsync import --wait`, against the sandbox over HTTP: nobody is held
 * twice (`/_sandbox/duplicates`), every row's person is at the service,
 * every row has one outcome and none failed (a card row whose job Redis
 * forgot reads its card data again from the file), `import --wait` ends, and the operator is told
 * (the error line, the import in read-back mode).
 */
import { describe, expect, it } from 'vitest';
import { lossTry, type LossKind, type LossTryResult } from '../../bench/lostWrites.js';
import { requireBuiltCli } from '../support/cli.js';

const ROWS = 600;

async function tryLoss(kind: LossKind, file: 'customers' | 'signups'): Promise<LossTryResult> {
  requireBuiltCli();
  const result = await lossTry({ kind, file, rows: ROWS, rate: 200, quietMs: 30_000 });
  console.log(
    `${kind} ${file}: loss ${result.windowMs} ms after ${result.settledAtLoss} rows; duplicates ${result.duplicates}, missing ${result.missingAtService}, ` +
      `no outcome ${result.noOutcome}, exit ${result.waitExit}, ${JSON.stringify(result.counts)}, ${result.seconds.toFixed(0)} s` +
      result.stuck.map((line) => `\n  stuck: ${line}`).join(''),
  );
  return result;
}

function expectPromiseKept(result: LossTryResult): void {
  expect(result.settledAtLoss).toBeGreaterThan(0);
  expect(result.settledAtLoss).toBeLessThan(ROWS);
  // Nothing created twice: the sandbox's own count, over HTTP.
  expect(result.identitiesTwice).toBe(0);
  expect(result.duplicates).toBe(0);
  // Nobody missing, every row one outcome, and the wait ended.
  expect(result.missingAtService).toBe(0);
  expect(result.noOutcome).toBe(0);
  expect(result.counts.settled).toBe(ROWS);
  expect([0, 3]).toContain(result.waitExit);
  // Every row succeeded: a card row whose job Redis forgot, with its sealed card data, read it again from the file
  // (src/import/cardCells.ts), which is still where it was imported from.
  expect(result.notes).toEqual([]);
  // Told: the error line, and the import in read-back mode.
  expect(result.output).toMatch(/Redis lost acknowledged writes/);
  expect(result.readBack).toBe(true);
}

describe('a Redis that comes back without its last acknowledged writes', () => {
  for (const file of ['customers', 'signups'] as const) {
    it(`AOF everysec, host crash (AOF cut to its last fsync): ${file}`, async () => expectPromiseKept(await tryLoss('aof-crash', file)), 150_000);
    it(`an older RDB snapshot: ${file}`, async () => expectPromiseKept(await tryLoss('rdb', file)), 150_000);
    it(`a replica that was behind, promoted: ${file}`, async () => expectPromiseKept(await tryLoss('replica', file)), 150_000);
  }
});
