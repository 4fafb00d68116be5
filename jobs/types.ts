import type { Logger } from 'pino';
import type { ApiClient } from '../src/api/client.js';
import type { ColumnPlan } from '../src/csv/columns.js';
import type { RowOptions } from '../src/csv/rows.js';
import type { CustomerFinder } from '../src/customers/finder.js';
import type { NameSearch } from '../src/customers/nameSearch.js';
import type { CustomerGuard, LearnedCreate } from '../src/customers/guard.js';
import type { ApiBudget } from '../src/redis/budget.js';
import type { RowOutcome } from '../src/outcomes.js';

export type { RowOutcome };

/**
 * What a row processor receives: the row, its collaborators,
 * and the ledger's word on earlier attempts. No BullMQ in sight, so a
 * processor is testable with nothing but a client and a sandbox.
 */
export interface RowContext {
  importId: string;
  row: number;
  plan: ColumnPlan;
  /** The row's cells, card data restored from its sealed job data. */
  cells: readonly string[];
  options: RowOptions;
  api: ApiClient;
  /** The fleet's budget: a 429 on a search page waits it out. */
  budget: Pick<ApiBudget, 'block'>;
  /**
   * `sent`: an earlier attempt may have applied this row (its answer was lost,
   * or its worker died mid-request), so a create must reconcile before it
   * sends again. `pending`: nothing of this row can have reached the service.
   */
  previous: 'pending' | 'sent';
  /** Upsert: the customers that matched before the first attempt, when recorded. */
  preexisting: readonly string[] | undefined;
  /** Marks the row `sent` in the ledger; called right before a non-idempotent request leaves. */
  markSent(): Promise<void>;
  /** Records which customers matched before the first attempt (upsert). */
  recordPreexisting(customerIds: readonly string[]): Promise<void>;
  /** The duplicate guard of creates; undefined when the import allows duplicates. */
  guard: CustomerGuard | undefined;
  /**
   * How long the guard's claim may wait to go to Redis with other rows'
   * (ms; the runner's answer while its rows wait for a request slot, when
   * the wait costs no request). Without it, the claims of one turn go
   * together.
   */
  gatherMs?(): number;
  /**
   * After a create: hands what the guard is to learn to the runner, which
   * writes it with the row's settle (one Redis write for both, instead of
   * one each). Without it, the processor awaits the guard's `created`.
   */
  learnCreated?(create: LearnedCreate): void;
  /** How an upsert finds its customers (the index, a scan, or a search by name). */
  finder: CustomerFinder | undefined;
  /** Searches by the more selective of a person's names, shared per import. */
  names: NameSearch | undefined;
  log: Logger;
}

export type RowProcessor = (ctx: RowContext) => Promise<RowOutcome>;

/**
 * Reads a possibly-applied create back: its verdict (reconciled or
 * needs-review), or undefined when nothing of it is found.
 */
export type ReadBack = (ctx: RowContext) => Promise<RowOutcome | undefined>;
