import type { Queue } from 'bullmq';
import { apiRateLimited } from '../metrics.js';
import { indexReport, type IndexReport } from '../customers/report.js';
import type { Runtime } from '../runtime.js';
import { recentRollbacks, type Rollback } from '../store/rollback.js';

/** The job states shown for each queue (BullMQ's names). */
export const QUEUE_STATES = ['waiting', 'prioritized', 'active', 'delayed', 'failed'] as const;
export type QueueState = (typeof QUEUE_STATES)[number];

/** How many recent imports the 429 figure sums. */
export const RECENT_IMPORTS = 50;

export interface QueueHealth {
  queues: Array<{ name: string; paused: boolean; counts: Record<QueueState, number> }>;
  budget: {
    /** SUBSYNC_RATE, requests per second for the whole fleet; undefined = learned from 429s. */
    rate: number | undefined;
    /** The fleet's rate learned from 429s (requests/s); undefined while none is learned. */
    learned: number | undefined;
    /** Epoch ms until which nobody sends (after a 429); undefined when not blocked. */
    blockedUntil: number | undefined;
  };
  rateLimited: {
    /** 429s summed over the most recent imports' figures (every process that ran their rows). */
    recentImports: number;
    imports: number;
    /** 429s this process has seen since it started (the metrics counter). */
    thisProcess: number;
  };
  /** Requests of the most recent imports by kind: searches, reads of one record, writes. */
  requests: { searches: number; reads: number; writes: number };
  /** What subsync knows of the service's customers (its memory is `subsync index status`'s). */
  customerIndex: IndexReport;
  /** The latest times Redis came back without acknowledged writes, newest first (src/store/rollback.ts). */
  rollbacks: Rollback[];
}

async function queueCounts(queue: Queue): Promise<{ name: string; paused: boolean; counts: Record<QueueState, number> }> {
  const [counts, paused] = await Promise.all([queue.getJobCounts(...QUEUE_STATES), queue.isPaused()]);
  const byState = Object.fromEntries(QUEUE_STATES.map((state) => [state, counts[state] ?? 0])) as Record<QueueState, number>;
  return { name: queue.name, paused, counts: byState };
}

/** Queue depths, the API budget, recent 429s and requests, and the customer index, read from Redis now. */
export async function queueHealth(runtime: Runtime, now = Date.now()): Promise<QueueHealth> {
  const { redis, store, queues } = runtime;
  const [rows, control, blocked, learned, ids, counter] = await Promise.all([
    queueCounts(queues.rows),
    queueCounts(queues.control),
    redis.get(store.keys.budgetBlockedUntil),
    redis.hget(store.keys.budgetRate, 'r'),
    store.listImportIds(RECENT_IMPORTS),
    apiRateLimited.get(),
  ]);
  const [figures, customerIndex] = await Promise.all([Promise.all(ids.map((id) => store.counts(id))), indexReport(runtime.customers, { memory: false }, now)]);
  const sum = (pick: (f: (typeof figures)[number]) => number): number => figures.reduce((total, f) => total + pick(f), 0);
  const blockedUntil = blocked === null ? undefined : Number(blocked);
  return {
    queues: [rows, control],
    budget: { rate: runtime.config.rate, learned: learned === null ? undefined : Number(learned), blockedUntil: blockedUntil !== undefined && blockedUntil > now ? blockedUntil : undefined },
    rateLimited: {
      recentImports: sum((f) => f.rateLimited),
      imports: ids.length,
      thisProcess: counter.values.reduce((total, v) => total + v.value, 0),
    },
    requests: { searches: sum((f) => f.searches), reads: sum((f) => f.reads), writes: sum((f) => f.apiCalls - f.searches - f.reads) },
    customerIndex,
    rollbacks: await recentRollbacks(runtime.store.marks, runtime.store, 5),
  };
}
