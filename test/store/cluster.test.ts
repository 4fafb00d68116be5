/**
 * SUBSYNC_REDIS_CLUSTER: subsync on a real three-master Redis Cluster,
 * started here (redis-server in cluster mode, joined by `redis-cli --cluster
 * create`). REDIS_URL names a master that does NOT hold the slot of
 * `{subsync}`, so every command must follow the cluster's redirections.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { startSandbox, type Sandbox } from '../../src/sandbox/server.js';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';
import { hashSlot } from '../support/fleet.js';
import { until } from '../support/pipeline.js';
import { allKeys, startOwnRedis, type OwnRedis } from '../support/redisServer.js';

const PREFIX = '{subsync}';

let nodes: OwnRedis[] = [];
let clients: Redis[] = [];
let sandbox: Sandbox | undefined;
let dir: string | undefined;
beforeAll(requireBuiltCli);
afterEach(async () => {
  await killAll();
  for (const client of clients) client.disconnect();
  for (const node of nodes) await node.stop();
  await sandbox?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  nodes = [];
  clients = [];
  sandbox = dir = undefined;
});

/** Three empty cluster-mode masters joined into one cluster with every slot covered. */
async function startCluster(configDir: string): Promise<void> {
  for (let i = 0; i < 3; i++) {
    nodes.push(
      await startOwnRedis([
        '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction',
        '--cluster-enabled', 'yes', '--cluster-config-file', path.join(configDir, `nodes-${i}.conf`), '--dir', configDir,
      ]),
    );
  }
  const create = spawn('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'pipe' });
  let out = '';
  create.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  create.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => create.once('exit', resolve));
  if (code !== 0) throw new Error(`redis-cli --cluster create failed:\n${out}`);
  clients = nodes.map((n) => new Redis(n.url, { maxRetriesPerRequest: 1 }));
  for (const client of clients) {
    await until(async () => ((await client.call('CLUSTER', 'INFO')) as string).includes('cluster_state:ok') || undefined, 'the cluster to be ok', 30_000);
  }
}

/** The index of the master serving `slot`, from CLUSTER SLOTS. */
async function ownerOf(slot: number): Promise<number> {
  const ranges = (await clients[0]!.call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, ...unknown[]], ...unknown[]]>;
  const range = ranges.find(([from, to]) => from <= slot && slot <= to);
  const port = range?.[2][1];
  const index = nodes.findIndex((n) => n.port === port);
  if (index < 0) throw new Error(`no master serves slot ${slot}`);
  return index;
}

describe('SUBSYNC_REDIS_CLUSTER', () => {
  it('is refused without a hash-tagged prefix, naming the variable', () => {
    expect(() => loadConfig({ SUBSYNC_REDIS_CLUSTER: 'true', SUBSYNC_QUEUE_PREFIX: 'subsync' })).toThrow(/SUBSYNC_REDIS_CLUSTER="true": expected true or false \(true needs SUBSYNC_QUEUE_PREFIX to start with a hash tag/);
    expect(() => loadConfig({ SUBSYNC_REDIS_CLUSTER: 'true', SUBSYNC_QUEUE_PREFIX: PREFIX, REDIS_URL: 'redis://127.0.0.1:6379/2' })).toThrow(/SUBSYNC_REDIS_CLUSTER/);
    expect(loadConfig({ SUBSYNC_REDIS_CLUSTER: 'true', SUBSYNC_QUEUE_PREFIX: PREFIX }).redisCluster).toBe(true);
    expect(loadConfig({}).redisCluster).toBe(false);
  });

  it('imports through a three-master cluster from a node that does not hold the slot: each row once, keys on the slot\'s master only', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'subsync-cluster-'));
    await startCluster(dir);
    const owner = await ownerOf(hashSlot(PREFIX));
    const seed = nodes[(owner + 1) % nodes.length]!;
    sandbox = await startSandbox({ port: 0, seed: false });
    const env = (cluster: boolean): NodeJS.ProcessEnv => ({
      REDIS_URL: seed.url,
      SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
      SUBSYNC_REDIS_CLUSTER: String(cluster),
      SUBSYNC_QUEUE_PREFIX: PREFIX,
      SUBSYNC_API_URL: sandbox!.url,
      SUBSYNC_DATA_DIR: path.join(dir!, 'data'),
      SUBSYNC_LOG_LEVEL: 'warn',
    });
    const rows = Array.from({ length: 60 }, (_, i) => `Row${i + 1},Cluster,row${i + 1}@example.com`);
    const file = path.join(dir, 'customers.csv');
    await writeFile(file, `FirstName,LastName,EmailAddress\n${rows.join('\n')}\n`);

    // A plain client on that node is sent elsewhere (MOVED) and gives up: the redirections are real.
    const plain = subsync(['import', file], env(false));
    expect((await plain.exited).code).not.toBe(0);
    expect(plain.stderr()).toMatch(/MOVED/);

    const worker = subsync(['worker', '--concurrency', '4'], env(true));
    await waitForOutput(worker, /worker running/);
    const run = subsync(['import', file, '--wait'], env(true));
    expect((await run.exited).code, run.stderr()).toBe(0);
    worker.child.kill('SIGTERM');
    expect((await worker.exited).code, worker.stderr()).toBe(0);

    const created = sandbox.store.customers().filter((c) => c.LastName === 'Cluster').map((c) => c.FirstName);
    expect(created.sort()).toEqual(rows.map((_, i) => `Row${i + 1}`).sort());
    const onOwner = await allKeys(clients[owner]!);
    expect(onOwner.some((key) => key.startsWith(`${PREFIX}:import:`))).toBe(true);
    expect(onOwner.some((key) => key.startsWith(`${PREFIX}:subsync-rows:`))).toBe(true);
    for (const [index, client] of clients.entries()) if (index !== owner) expect(await allKeys(client)).toEqual([]);
  }, 180_000);
});
