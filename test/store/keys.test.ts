/**
 * SUBSYNC_QUEUE_PREFIX={subsync} on Redis Cluster: every key subsync and
 * BullMQ write carries the prefix, so all hash to the slot of `subsync`,
 * which multi-key commands and the Lua scripts need.
 *
 * Against a redis-server of the test's own in cluster mode (one node holding
 * every slot): it refuses any command or script whose keys span two slots
 * (CROSSSLOT), as a real cluster does, and it holds only what this test wrote.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { exportKeys } from '../../src/export/state.js';
import { storeKeys } from '../../src/redis/keys.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/server.js';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';
import { hashSlot } from '../support/fleet.js';
import { until } from '../support/pipeline.js';
import { allKeys, startOwnRedis, type OwnRedis } from '../support/redisServer.js';

const PREFIX = '{subsync}';

let redis: OwnRedis | undefined;
let client: Redis | undefined;
let sandbox: Sandbox | undefined;
let dir: string | undefined;
beforeAll(requireBuiltCli);
afterEach(async () => {
  await killAll();
  client?.disconnect();
  await redis?.stop();
  await sandbox?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  client = redis = sandbox = dir = undefined;
});

/** A one-node Redis Cluster: a cluster-mode redis-server that owns all 16384 slots. */
async function startClusterNode(configDir: string): Promise<{ server: OwnRedis; client: Redis }> {
  const server = await startOwnRedis([
    '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction',
    '--cluster-enabled', 'yes', '--cluster-config-file', path.join(configDir, 'nodes.conf'), '--dir', configDir,
  ]);
  const c = new Redis(server.url, { maxRetriesPerRequest: 1 });
  await c.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
  await until(async () => ((await c.call('CLUSTER', 'INFO')) as string).includes('cluster_state:ok') || undefined, 'the cluster to be ok', 20_000);
  return { server, client: c };
}

describe('the {subsync} prefix on Redis Cluster', () => {
  it('the hash slot helper agrees with Redis, and subsync\'s own key names carry the prefix', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-keys-'));
    ({ server: redis, client } = await startClusterNode(dir));
    // Every key name subsync builds itself, whatever keys are added later.
    const named = [...Object.values(storeKeys(PREFIX)), ...Object.values(exportKeys(PREFIX))].map((key) => (typeof key === 'function' ? key('id1') : key));
    expect(named.length).toBeGreaterThan(10);
    for (const name of named) expect(name.startsWith(`${PREFIX}:`), name).toBe(true);
    for (const name of [...named, 'plain', 'a{}b', '{}x', 'x{y}z', '{subsync']) expect(hashSlot(name), name).toBe(Number(await client.call('CLUSTER', 'KEYSLOT', name)));
  }, 60_000);

  it('an import, a sign-up import with card data, an export and a schedule write only {subsync} keys, all in one slot', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-keys-'));
    ({ server: redis, client } = await startClusterNode(dir));
    sandbox = await startSandbox({ port: 0 });
    const c = client;
    const env = (prefix: string): NodeJS.ProcessEnv => ({
      REDIS_URL: redis!.url,
      SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
      SUBSYNC_QUEUE_PREFIX: prefix,
      SUBSYNC_API_URL: sandbox!.url,
      SUBSYNC_DATA_DIR: path.join(dir!, 'data'),
      SUBSYNC_CARD_KEY: 'cd'.repeat(32),
      SUBSYNC_RATE: '200',
      SUBSYNC_LOG_LEVEL: 'warn',
    });

    // The node enforces slots: keys of two slots in one script are refused.
    await expect(c.eval("return redis.call('GET', KEYS[1])", 2, 'subsync:a', 'subsync:b')).rejects.toThrow(/CROSSSLOT/);

    const customers = path.join(dir, 'customers.csv');
    const signups = path.join(dir, 'signups.csv');
    // Customers: row 3 is invalid (never sent). Sign-ups (card data, sealed in the jobs): row 2 is
    // refused by the service, a retired offer, so BullMQ keeps its failed job.
    await writeFile(customers, 'FirstName,LastName,EmailAddress\nAda,Slot,ada@example.com\nBob,Slot,bob@example.com\nCy,Slot,cy@\n');
    await writeFile(
      signups,
      'Customer.FirstName,Customer.LastName,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,CreditCardInfo.CVCode,Subscription.OfferCode\n' +
        'Eve,Slot,4111111111111111,1230,737,STREAM-PLUS\nFay,Slot,4111111111111111,1230,737,LEGACY-2019\n',
    );

    // Without a hash tag the same import is refused: BullMQ's and subsync's keys span slots.
    const untagged = subsync(['import', customers], env('subsync'));
    expect((await untagged.exited).code).not.toBe(0);
    expect(untagged.stderr()).toMatch(/CROSSSLOT|same slot/);
    for (const key of await allKeys(c)) await c.del(key);

    const worker = subsync(['worker', '--concurrency', '4'], env(PREFIX));
    await waitForOutput(worker, /worker running/);
    const first = subsync(['import', customers, '--wait'], env(PREFIX));
    expect((await first.exited).code, first.stderr()).toBe(3);
    const second = subsync(['import', signups, '--wait'], env(PREFIX));
    expect((await second.exited).code, second.stderr()).toBe(3);
    expect(sandbox.store.customers().filter((customer) => customer.LastName === 'Slot').map((customer) => customer.FirstName).sort()).toEqual(['Ada', 'Bob', 'Eve']);
    const exported = subsync(['export', '--wait'], env(PREFIX));
    expect((await exported.exited).code, exported.stderr()).toBe(0);
    const scheduled = subsync(['schedule', 'export', '--cron', '0 3 * * *', '--tz', 'UTC'], env(PREFIX));
    expect((await scheduled.exited).code, scheduled.stderr()).toBe(0);
    worker.child.kill('SIGTERM');
    expect((await worker.exited).code, worker.stderr()).toBe(0);

    const keys = await allKeys(c);
    const slot = hashSlot(PREFIX);
    const bySlot = new Map<number, string[]>();
    for (const key of keys) {
      const keySlot = Number(await c.call('CLUSTER', 'KEYSLOT', key));
      bySlot.set(keySlot, [...(bySlot.get(keySlot) ?? []), key]);
    }
    console.log(`{subsync} keys after an import, a sign-up import, an export and a schedule: ${keys.length} keys, slots ${[...bySlot.keys()].join(', ')} (CRC16("subsync") % 16384 = ${slot})`);
    expect(keys.filter((key) => !key.startsWith(`${PREFIX}:`))).toEqual([]);
    expect([...bySlot.keys()]).toEqual([slot]);
    // The keys of every part were written: the ledger, the budget, both queues, an export, the schedule.
    for (const part of [':import:', ':budget:tat', ':instance', ':subsync-rows:', ':subsync-control:', ':export:', ':subsync-control:repeat']) {
      expect(keys.some((key) => key.includes(part)), part).toBe(true);
    }
  }, 180_000);
});
