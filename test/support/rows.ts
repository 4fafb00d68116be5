import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { createApiClient, type ApiClient } from '../../src/api/client.js';
import type { Endpoint } from '../../src/api/errors.js';
import { planColumns, type ColumnPlan } from '../../src/csv/columns.js';
import { maskCells } from '../../src/csv/rows.js';
import { createLogger } from '../../src/log.js';
import type { ImportKind, JobName } from '../../src/outcomes.js';
import type { RowContext } from '../../jobs/index.js';
import { createBudget, type ApiBudget } from '../../src/redis/budget.js';
import { createRedis, deleteKeysWithPrefix, type RedisClient } from '../../src/redis/redis.js';
import { createImportStore, type ImportOptions, type ImportStore } from '../../src/store/importStore.js';
import type { LedgerEntry } from '../../src/store/ledger.js';
import { startSandbox, type Sandbox, type SandboxFaults } from '../../src/sandbox/server.js';
import { SandboxRefusal } from '../../src/sandbox/store.js';
import { REDIS_URL } from './pipeline.js';

/**
 * What the row protocol and the processors run against in a test: the
 * sandbox on real HTTP, a real Redis under a key prefix of the test's own,
 * the fleet's budget on it, an API client drawing from that budget, and
 * the sandbox's requests in the order they arrived. No queue.
 */
export interface RowsWorld {
  sandbox: Sandbox;
  redis: RedisClient;
  prefix: string;
  store: ImportStore;
  budget: ApiBudget;
  api: ApiClient;
  /** Every /json request that reached a route, in order. */
  requests: Array<{ endpoint: Endpoint; method: string }>;
  /** Installs a hook awaited before each request leaves the client (after the budget draw), told its endpoint. */
  beforeRequest(hook: ((endpoint: Endpoint) => Promise<void>) | undefined): void;
  /** The next request to `endpoint` that reaches its route is refused with `status`, unapplied. */
  refuseNext(endpoint: Endpoint, status: number, message: string): void;
  /** Every log line written so far (JSON lines). */
  logs(): string;
  logger: ReturnType<typeof createLogger>;
  close(): Promise<void>;
}

export async function openRowsWorld(options: { faults?: Partial<SandboxFaults>; random?: () => number } = {}): Promise<RowsWorld> {
  const sandbox = await startSandbox({ port: 0, faults: options.faults, random: options.random });
  const prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
  const redis = createRedis(REDIS_URL);
  const store = createImportStore(redis, prefix);
  const budget = createBudget(redis, store.keys, { rate: undefined });
  const requests: RowsWorld['requests'] = [];
  const refusals: Array<{ endpoint: Endpoint; status: number; message: string }> = [];
  sandbox.intercept((request) => {
    requests.push({ endpoint: request.endpoint, method: request.method });
    const index = refusals.findIndex((r) => r.endpoint === request.endpoint);
    const [refusal] = index === -1 ? [] : refusals.splice(index, 1);
    if (refusal) throw new SandboxRefusal(refusal.status, refusal.message);
  });
  let logText = '';
  const logger = createLogger({
    level: 'debug',
    destination: new Writable({
      write(chunk: Buffer, _encoding, done) {
        logText += chunk.toString('utf8');
        done();
      },
    }),
  });
  let hook: ((endpoint: Endpoint) => Promise<void>) | undefined;
  const api = createApiClient({
    baseUrl: sandbox.url,
    requestTimeoutMs: 2_000,
    beforeRequest: async (endpoint) => {
      await budget.acquire();
      await hook?.(endpoint);
    },
    onCall: (call) => budget.observe(call),
  });
  return {
    sandbox,
    redis,
    prefix,
    store,
    budget,
    api,
    requests,
    beforeRequest(next) {
      hook = next;
    },
    refuseNext(endpoint, status, message) {
      refusals.push({ endpoint, status, message });
    },
    logs: () => logText,
    logger,
    async close() {
      await api.close();
      await sandbox.close();
      await deleteKeysWithPrefix(redis, prefix);
      redis.disconnect();
    },
  };
}

/** A column plan as the producer makes it from a file's header. */
export const planOfHeaders = (kind: ImportKind, headers: string[], match?: string): ColumnPlan => planColumns({ file: 'rows.csv', kind, headers, ...(match ? { match } : {}) });

/**
 * An import as the producer would leave it, written through the store
 * alone: its record, one pending ledger entry per row (card cells masked,
 * as the producer stores them), and its total.
 */
export async function seedImport(
  store: ImportStore,
  input: { kind: ImportKind; headers: string[]; rows: string[][]; job: JobName; options?: Partial<ImportOptions> },
): Promise<{ importId: string; plan: ColumnPlan }> {
  const importId = `rows-${randomUUID().slice(0, 8)}`;
  const plan = planOfHeaders(input.kind, input.headers, input.options?.match);
  await store.createImport({
    id: importId,
    file: 'rows.csv',
    kind: input.kind,
    headers: input.headers,
    paths: plan.paths,
    options: { expiryFormat: 'MMYY', attempts: 3, ...input.options },
    createdAt: Date.now(),
    state: 'enqueuing',
    round: 0,
  });
  const entries = input.rows.map((cells, i): { row: number; entry: LedgerEntry } => ({ row: i + 1, entry: { cells: maskCells(plan, cells), job: input.job, status: 'pending', attempts: 0 } }));
  await store.putPendingRows(importId, entries);
  await store.markEnqueued(importId, input.rows.length);
  return { importId, plan };
}

/**
 * A processor's context, as the protocol would give it, for a row of
 * `cells` under `headers`: no guard, finder or shared name search (a bare
 * processor searches by last name). `marks` holds, for each markSent, how
 * many requests had reached the sandbox when it was called; `preexisting`
 * what recordPreexisting was told.
 */
export function rowContext(
  w: RowsWorld,
  input: { kind: ImportKind; headers: string[]; cells: string[]; match?: string; previous?: 'pending' | 'sent'; preexisting?: readonly string[] },
): RowContext & { marks: number[]; recorded: Array<readonly string[]> } {
  const plan = planOfHeaders(input.kind, input.headers, input.match);
  const marks: number[] = [];
  const recorded: Array<readonly string[]> = [];
  return {
    importId: 'processor-test',
    row: 1,
    plan,
    cells: input.cells,
    options: { expiryFormat: 'MMYY', ...(input.match ? { match: input.match } : {}) },
    api: w.api,
    budget: w.budget,
    previous: input.previous ?? 'pending',
    preexisting: input.preexisting,
    async markSent() {
      marks.push(w.requests.length);
    },
    async recordPreexisting(ids) {
      recorded.push(ids);
    },
    guard: undefined,
    finder: undefined,
    names: undefined,
    log: w.logger,
    marks,
    recorded,
  };
}
