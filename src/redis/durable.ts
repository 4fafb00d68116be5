import { Cluster, Redis } from 'ioredis';
import type { RedisClient } from './redis.js';
import { hasWaitAof } from './redis.js';

/**
 * Makes a batch's `sent` marks durable before its requests leave, where
 * Redis allows it: `WAITAOF 1 0` when the AOF is on and Redis has WAITAOF
 * (7.2 and later: it returns once the marks are fsynced to the local AOF),
 * and `WAIT <replicas>` when replicas are connected (once each holds them).
 * Both wait for the writes made on their own connection, so the marks go on
 * a connection of their own (`connection`), and the waits block nothing
 * else the process does.
 *
 * Group commit: one wait covers every mark written before it on that
 * connection, so while one is out the batches that mark meanwhile share the
 * next one: at most two waits at a time, whatever the number of batches.
 *
 * What Redis offers is read from INFO (allowed where CONFIG is not, as on
 * managed services), again every `refreshMs`.
 */
export interface MarkSync {
  /** Resolves once every mark this connection wrote before the call is as durable as Redis allows. */
  sync(): Promise<SyncResult>;
}

/** What one wait gave: asked and acknowledged, for the AOF and for the replicas; `short` when fewer than asked answered in time. */
export interface SyncResult {
  aof: { asked: boolean; fsynced: boolean };
  replicas: { asked: number; acknowledged: number };
  short: boolean;
}

const NOTHING: SyncResult = { aof: { asked: false, fsynced: false }, replicas: { asked: 0, acknowledged: 0 }, short: false };

export interface MarkSyncOptions {
  /** How long a wait may take before the batch goes on without it (told as short). Default 2000 ms. */
  timeoutMs?: number;
  /** How often what Redis offers is read again. Default 5000 ms. */
  refreshMs?: number;
}

interface Offer {
  waitAof: boolean;
  replicas: number;
  at: number;
}

export function createMarkSync(connection: RedisClient, options: MarkSyncOptions = {}): MarkSync {
  const timeoutMs = options.timeoutMs ?? 2000;
  const refreshMs = options.refreshMs ?? 5000;
  // On a cluster, subsync's keys live on one master (one hash tag): the waits go to it.
  const node = (): Redis | undefined => (connection instanceof Cluster ? connection.nodes('master')[0] : connection);
  let offer: Offer | undefined;
  let reading: Promise<Offer> | undefined;

  async function readOffer(): Promise<Offer> {
    const redis = node();
    if (!redis) return { waitAof: false, replicas: 0, at: Date.now() };
    const [server, persistence, replication] = await Promise.all([redis.info('server'), redis.info('persistence'), redis.info('replication')]);
    const version = /redis_version:([\d.]+)/.exec(server)?.[1];
    return {
      waitAof: hasWaitAof(version) && /aof_enabled:1/.test(persistence),
      replicas: Number(/connected_slaves:(\d+)/.exec(replication)?.[1] ?? 0),
      at: Date.now(),
    };
  }

  async function currentOffer(): Promise<Offer> {
    if (offer && Date.now() - offer.at < refreshMs) return offer;
    reading ??= readOffer()
      .then((read) => (offer = read))
      .finally(() => {
        reading = undefined;
      });
    return reading;
  }

  async function once(): Promise<SyncResult> {
    const { waitAof, replicas } = await currentOffer();
    const redis = node();
    if (!redis || (!waitAof && replicas === 0)) return NOTHING;
    if (waitAof) {
      const reply = await redis.call('WAITAOF', '1', String(replicas), String(timeoutMs));
      const [local = 0, acked = 0] = Array.isArray(reply) ? reply.map(Number) : [];
      return { aof: { asked: true, fsynced: local >= 1 }, replicas: { asked: replicas, acknowledged: acked }, short: local < 1 || acked < replicas };
    }
    const acked = Number(await redis.call('WAIT', String(replicas), String(timeoutMs)));
    return { aof: { asked: false, fsynced: false }, replicas: { asked: replicas, acknowledged: acked }, short: acked < replicas };
  }

  let out: Promise<SyncResult> | undefined;
  let next: Promise<SyncResult> | undefined;
  const start = (): Promise<SyncResult> => {
    const run = once().finally(() => {
      if (out === run) out = undefined;
    });
    out = run;
    return run;
  };
  return {
    sync() {
      if (!out) return start();
      // The wait out was sent before this call's marks: the next one covers them, and every call until it leaves.
      next ??= out
        .catch(() => undefined)
        .then(() => {
          next = undefined;
          return start();
        });
      return next;
    },
  };
}
