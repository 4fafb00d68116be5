/**
 * Row outcomes: every row of an import ends as exactly one
 * of these. The glossary:
 * - created: a customer was created by POST /json/customers;
 * - updated: an existing customer or payment method was replaced by PUT;
 * - signed-up: POST /json/signups created the customer and the subscription;
 * - reconciled: a create whose answer was lost had in fact happened, found by
 *   reading back (the CustomerID is the one found);
 * - invalid: the row broke a rule and was never sent;
 * - failed: the API refused it, or its retries ran out;
 * - needs-review: the outcome cannot be proven either way; never guessed;
 * - unchanged: an update whose record, as read, already holds what the row
 *   says: nothing was sent;
 * - exists: a create (a customer without CustomerID, or a sign-up) whose
 *   person (first name, last name and email) the service already holds: not
 *   created again; the CustomerID is the one found;
 * - duplicate: a row about the same person or customer as an earlier row of
 *   the same file: never sent; the note names the earlier row;
 * - cancelled: the import was cancelled before the row was sent: nothing of
 *   it reached the service, and it is written to unprocessed.csv to be
 *   imported again. Neither a success nor a failure.
 */
export const ROW_STATUSES = ['created', 'updated', 'signed-up', 'reconciled', 'unchanged', 'exists', 'duplicate', 'invalid', 'failed', 'needs-review', 'cancelled'] as const;
export type RowStatus = (typeof ROW_STATUSES)[number];

/**
 * Outcomes that count as success for `import --wait`'s exit code: the
 * service holds what the row asked for. `exists` and `duplicate` are among
 * them: the person is there (a list dropped twice is not a failure), and the
 * results name the customer or the earlier row.
 */
export const SUCCESS_STATUSES: ReadonlySet<RowStatus> = new Set(['created', 'updated', 'signed-up', 'reconciled', 'unchanged', 'exists', 'duplicate']);
/** Outcomes that go into errors.csv and the dashboard's list. */
export const PROBLEM_STATUSES: ReadonlySet<RowStatus> = new Set(['invalid', 'failed', 'needs-review']);
/**
 * Outcomes of rows never sent because their import was stopped: neither in
 * SUCCESS_STATUSES nor in PROBLEM_STATUSES. They go into unprocessed.csv.
 */
export const STOPPED_STATUSES: ReadonlySet<RowStatus> = new Set(['cancelled']);

/**
 * How a row ended: the one shape of an outcome, whoever tells it (a
 * processor, a read-back, the retry decision, the producer). The ledger
 * stores it (src/store/ledger.ts), results.csv and the dashboard show it.
 * `note` explains it: the rule broken, the API's words, how a create was
 * reconciled, or why the row needs review.
 */
export interface RowOutcome {
  status: RowStatus;
  customerId?: string;
  subscriptionId?: string;
  paymentMethodKey?: string;
  note?: string;
  /** needs-review (or exists with several holders): the candidate CustomerIDs. */
  candidates?: readonly string[];
}

export const isRowStatus = (value: string): value is RowStatus => (ROW_STATUSES as readonly string[]).includes(value);

/** The three kinds of CSV file. */
export const IMPORT_KINDS = ['customers', 'signups', 'cards'] as const;
export type ImportKind = (typeof IMPORT_KINDS)[number];

/** The row job names of the rows queue. */
export const JOB_NAMES = ['customer.create', 'customer.update', 'customer.upsert', 'signup', 'paymentMethod.update'] as const;
export type JobName = (typeof JOB_NAMES)[number];
