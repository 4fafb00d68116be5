/**
 * Every Redis key subsync itself writes (BullMQ keeps its own under the same
 * prefix). With a hash-tagged prefix such as `{subsync}`, they all live in
 * one Redis Cluster slot, which the Lua scripts need.
 */
export function storeKeys(prefix: string) {
  return {
    /** Sorted set of import ids by creation time. */
    imports: `${prefix}:imports`,
    /** Hash: the import record (file, kind, columns, options, total, round, times). */
    importRecord: (importId: string) => `${prefix}:import:${importId}`,
    /** Hash: row number -> ledger entry (JSON). */
    ledger: (importId: string) => `${prefix}:import:${importId}:rows`,
    /** Hash: counts by status, `settled`, and the API figures of the import. */
    counts: (importId: string) => `${prefix}:import:${importId}:counts`,
    /** Hash: the import's run state (running, paused, cancelling, cancelled), why, and its canary (src/import/runState.ts). */
    runState: (importId: string) => `${prefix}:import:${importId}:run`,
    /** Set: ids of the import's jobs put back while it was paused or held, promoted when it runs on. */
    heldJobs: (importId: string) => `${prefix}:import:${importId}:held`,
    /** Set: the 8-byte digests of an upsert's match values (src/customers/finder.ts). */
    matchDigests: (importId: string) => `${prefix}:import:${importId}:match`,
    /** Hash: how an upsert finds its customers, and the lock of the worker deciding it. */
    findPlan: (importId: string) => `${prefix}:import:${importId}:plan`,
    findPlanLock: (importId: string) => `${prefix}:import:${importId}:plan-lock`,
    /** Hash: CustomerID → the record as a scan read it, for the upsert rows to lay themselves over. */
    foundRecords: (importId: string) => `${prefix}:import:${importId}:records`,
    /** Hash: rows settled and 429s per time bucket of an import (src/store/series.ts). */
    series: (importId: string) => `${prefix}:import:${importId}:series`,
    /** Hash: search-term digest -> row numbers of an import (src/store/searchIndex.ts). */
    searchIndex: (importId: string) => `${prefix}:import:${importId}:find`,
    /** Hash: the pages of an import's searches by name, and their counts (src/customers/nameSearch.ts). */
    nameSearches: (importId: string) => `${prefix}:import:${importId}:names`,
    /** String: the rollback counter, bumped by every mark and settle; it only grows while Redis keeps its writes (src/store/rollback.ts). */
    seq: `${prefix}:seq`,
    /** String: set while a process handles a rollback it detected; marks are refused (nothing is sent) meanwhile. */
    rollbackHold: `${prefix}:rollback-hold`,
    /**
     * String: the run id of the Redis server the fleet last checked for lost writes (src/store/rollback.ts).
     * It is persisted with everything else, so a Redis that restarted or failed over holds another's: marks
     * are refused until a process has handled that (read-back mode) and written this one's.
     */
    checkedRun: `${prefix}:checked-run`,
    /** List: the rollbacks detected, newest first (JSON), for status, the start check and the dashboard. */
    rollbacks: `${prefix}:rollbacks`,
    /** String: held by the worker that sweeps the imports in read-back mode this lock period. */
    readBackSweepLock: `${prefix}:read-back-sweep-lock`,
    /** String: set while the inbox is paused (`subsync inbox pause`): the watcher takes no new file. */
    inboxPaused: `${prefix}:inbox:paused`,
    /** String: held by the worker that sweeps the unfinished imports this interval (src/import/sweep.ts). */
    sweepLock: `${prefix}:sweep-lock`,
    /** The fleet-wide API budget: theoretical arrival time, and the block after a 429. */
    budgetTat: `${prefix}:budget:tat`,
    budgetBlockedUntil: `${prefix}:budget:blocked-until`,
    /** Hash: the fleet's learned (adaptive) rate, its step and last cut, and sent/admitted counts per second. */
    budgetRate: `${prefix}:budget:rate`,
  };
}
export type StoreKeys = ReturnType<typeof storeKeys>;
