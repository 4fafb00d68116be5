/**
 * What a row worker asks of an import's run state (src/import/runState.ts)
 * before it starts a row, in a few small calls:
 *
 * - `gate(importId, row)`: `go`, `hold` (paused, or after its canary rows
 *   while they run) or `cancel`;
 * - `hold(job, token, importId)`: puts the job back, delayed, without
 *   spending an attempt, and records it so a resume runs it at once;
 * - `cancelRow(importId, row)`: settles a pending row of a cancelling
 *   import as `cancelled` (a `sent` row is not: it finishes as it would);
 * - `refused(importId, row)`: a mark the ledger refused may have been
 *   refused by a cancel: then the row is cancelled here;
 * - `settled(importId, rows)`: after rows settle, ends the import's canary
 *   once its rows have all settled.
 */
import type { Job } from 'bullmq';
import type { Logger } from 'pino';
import { enqueueFinalize, type Queues } from '../queue/queues.js';
import type { RedisClient } from '../redis/redis.js';
import type { ImportStore } from '../store/importStore.js';
import type { Notifier } from '../notify/notifier.js';
import { observeRowSettled } from '../metrics.js';
import type { ImportKind } from '../outcomes.js';
import { concludeCanary, recordHeld } from './control.js';
import { HELD_RETURN_MS, gateOf, runStateCache, type RowGate } from './runState.js';

export interface RunGateDeps {
  redis: RedisClient;
  store: ImportStore;
  queues: Queues;
  logger: Logger;
  /** Told `import.paused` when a canary pauses its import. */
  notifier?: Pick<Notifier, 'notify'>;
}

export type RunGate = ReturnType<typeof createRunGate>;

export function createRunGate(deps: RunGateDeps) {
  const { redis, store, queues } = deps;
  const states = runStateCache(redis, store.keys);

  async function cancelRow(importId: string, row: number, kind?: ImportKind): Promise<boolean> {
    const result = await store.settleCancelled(importId, [row], 'pending');
    if (result.applied[0] && kind) observeRowSettled(kind, 'cancelled');
    if (result.complete) await enqueueFinalize(queues, importId, result.round);
    return result.applied[0] === true;
  }

  return {
    async gate(importId: string, row: number): Promise<RowGate> {
      return gateOf(await states.get(importId), row);
    },

    async hold(job: Job, token: string | undefined, importId: string): Promise<void> {
      await recordHeld(redis, store, importId, job.id ?? '');
      await job.moveToDelayed(Date.now() + HELD_RETURN_MS, token);
      // Resumed (or its canary ended) while this job ran: the promotion may have missed it, so it goes now.
      states.forget(importId);
      const now = await states.get(importId);
      if (now.state === 'running' && now.holdFrom === undefined) await job.promote().catch(() => undefined);
    },

    cancelRow,

    async refused(importId: string, row: number, kind?: ImportKind): Promise<boolean> {
      states.forget(importId);
      if (gateOf(await states.get(importId), row) !== 'cancel') return false;
      return cancelRow(importId, row, kind);
    },

    async settled(importId: string, rows: readonly number[]): Promise<void> {
      const status = await states.get(importId);
      if (status.holdFrom === undefined || status.canaryRows === undefined) return;
      const canaryRows = status.canaryRows;
      if (!rows.some((row) => row <= canaryRows)) return;
      const result = await concludeCanary(deps, importId);
      if (result.verdict !== 'none') states.forget(importId);
    },
  };
}
