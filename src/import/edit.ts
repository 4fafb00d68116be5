import { ROW_JOBS } from '../../jobs/index.js';
import { openSecrets, sealSecrets, type CardKeyring } from '../cards/crypto.js';
import { CUSTOMER_ID, secretPaths, signupCustomerPath, type ColumnPlan } from '../csv/columns.js';
import { maskCells, passwordColumn, secretValues, validateRow, type RowError, type RowOptions } from '../csv/rows.js';
import { scrubSecrets } from '../secrets.js';
import { PROBLEM_STATUSES, type JobName, type RowStatus } from '../outcomes.js';
import { enqueueFinalize, getRowJob, rowJobOptions, type Queues, type RowJobData } from '../queue/queues.js';
import { planOf } from '../store/plan.js';
import { rowTermDigests, searchableCells } from './searchTerms.js';
import type { ImportRecord, ImportStore, LedgerEntry } from '../store/importStore.js';
import { jobNameOf } from './producer.js';
import { SubsyncError } from '../errors.js';

/**
 * Edit and retry: support staff fix a row that did not
 * succeed (invalid, failed or needs-review) and run it again, without
 * re-importing the file.
 *
 * Decisions:
 * - Changes are keyed by body path (`Customer.EmailAddress`), one per column
 *   of the file; the card number and the CVC are not among them: they come
 *   apart, as `card`, are validated in memory, and leave only sealed in the
 *   job data. The ledger keeps the masked cells, as for an imported row.
 * - A customers row's Password comes apart the same way, as `card.Password`:
 *   an empty one keeps the password sealed in the row's job; when none is
 *   held any more (the job is gone, or the row was invalid and never had
 *   one) and the row had a password, it must be entered again. The ledger
 *   only ever holds `********` for it.
 * - The card number is reused from the row's kept job while it holds one
 *   sealed; once the import has settled it is gone (src/import/cardData.ts)
 *   and must be entered again. The CVC is never reused: it is kept only until
 *   a row has an outcome, so a retry asks for it again,
 *   and a blank one is sent blank (the API takes a card without it).
 * - A needs-review create may have been applied: it goes back as `sent`, so
 *   it reads back before sending, and the fields that reading back compares
 *   (names, email, the `--match` field, CustomerID) cannot be edited, or a
 *   corrected email would miss the customer already created and make a
 *   duplicate.
 * - A row whose cell count differed from the header (rule `column-count`)
 *   is edited with its cells laid on the header's columns in order, extra
 *   cells dropped and missing ones blank: the form shows where they landed.
 */

/** Why an edit was refused; call sites branch on these, never on message text. */
export type EditRefusal =
  | 'no-import'
  | 'no-row'
  /** The row succeeded, or is pending or in flight: only invalid, failed and needs-review rows are edited. */
  | 'not-editable'
  /** The row's job is waiting or running, or the row changed meanwhile. */
  | 'busy'
  /** A change names a path that is not a column of the file. */
  | 'unknown-column'
  /** A change names the card number, CVC or Password column: those come as `card`. */
  | 'card-column'
  /** A needs-review create's identifying fields cannot change (see above). */
  | 'identity-locked'
  /** The row's card number is no longer held: it must be entered again. */
  | 'card-needed'
  /** The row had a password, and it is no longer held: it must be entered again. */
  | 'password-needed'
  /** The row holds card data and this process has no SUBSYNC_CARD_KEY to seal it. */
  | 'no-card-key'
  /** The edited row still breaks a rule: `rowErrors` says which. */
  | 'invalid';

export class EditRefusedError extends SubsyncError {
  readonly code = 'EDIT_REFUSED';
  readonly reason: EditRefusal;
  /** For `invalid`: every rule the edited row breaks, each naming its column. */
  readonly rowErrors: readonly RowError[];

  constructor(reason: EditRefusal, message: string, rowErrors: readonly RowError[] = []) {
    super(message);
    this.reason = reason;
    this.rowErrors = rowErrors;
  }
}

/** The card cells and password of an edit, in plaintext, held only in memory until sealed. */
export interface CardInput {
  AccountNumber?: string;
  CVCode?: string;
  /** As typed, spaces and all; empty keeps the password held for the row. */
  Password?: string;
}

export interface EditResult {
  row: number;
  jobName: JobName;
  /** `sent` for a needs-review row: it reads back before anything is sent again. */
  state: 'pending' | 'sent';
  /** The import's new round: its results are written again when the row settles. */
  round: number;
}

/** What an edit form of one row needs to know about its card fields. */
export interface CardFields {
  /** The file has a card number column. */
  accountNumber: boolean;
  /** The card number must be entered: no sealed copy is held any more. */
  accountNumberNeeded: boolean;
  /** The file has a CVC column; the CVC is always asked again. */
  cvCode: boolean;
  /** The file is a customers file with a Password column. */
  password: boolean;
  /** The row had a password and none is held any more: it must be entered again. */
  passwordNeeded: boolean;
  /** A password is held for the row (sealed in its job): left empty, the field keeps it. */
  passwordHeld: boolean;
}

/**
 * Applies `changes` to a row that did not succeed, validates it again, reopens
 * its ledger entry with the new masked cells and queues its job again under
 * the same job id (a stale failed job of that id is removed first).
 * Throws {@link EditRefusedError} when the edit cannot be made; nothing is
 * changed then.
 */
export async function editAndRetryRow(
  store: ImportStore,
  queues: Queues,
  keyring: CardKeyring | undefined,
  importId: string,
  row: number,
  changes: Readonly<Record<string, string>>,
  card?: CardInput,
): Promise<EditResult> {
  const { record, entry, plan } = await editableRow(store, importId, row);
  const options: RowOptions = { expiryFormat: record.options.expiryFormat, match: record.options.match };
  const cells = alignedCells(plan, entry);
  const secretColumns = secretColumnsOf(plan);
  const changed = new Set<string>();
  for (const [path, value] of Object.entries(changes)) {
    const column = plan.index.get(path);
    if (column === undefined) throw new EditRefusedError('unknown-column', `"${path}" is not a column of ${record.file}`);
    if (column === secretColumns.accountNumber || column === secretColumns.cvCode) {
      throw new EditRefusedError('card-column', `${path} is card data: give it as the card, not as a change`);
    }
    if (column === secretColumns.password) {
      throw new EditRefusedError('card-column', `${path} is a secret: give it as the password, not as a change`);
    }
    if (cells[column] !== value) changed.add(path);
    cells[column] = value;
  }

  const reviewCreate = mayHaveBeenCreated(entry);
  const locked = lockedPaths(record, entry).filter((path) => changed.has(path));
  if (locked.length > 0) {
    throw new EditRefusedError(
      'identity-locked',
      `row ${row} may already have been created, and reading it back compares ${locked.join(', ')}: retry it unchanged (it reads back first), or resolve it in the service`,
    );
  }

  const job = await getRowJob(queues, importId, row);
  const secrets = cardCells(keyring, plan, secretColumns, job?.data.secrets, card, row, entry);
  for (const [column, value] of Object.entries(secrets)) cells[Number(column)] = value;

  // The messages never quote the row's card data or password, even typed into another column.
  const rowErrors = validateRow(plan, { row, line: 0, cells }, options).map((e) => ({ ...e, message: scrubSecrets(e.message, secretValues(plan, cells)) }));
  if (rowErrors.length > 0) {
    throw new EditRefusedError('invalid', `row ${row} still breaks ${rowErrors.length === 1 ? 'a rule' : `${rowErrors.length} rules`}: ${rowErrors.map((e) => e.message).join('; ')}`, rowErrors);
  }
  const jobName = jobNameOf(plan, cells, options);
  if (job) {
    const state = await job.getState();
    if (state !== 'failed' && state !== 'completed' && state !== 'unknown') {
      throw new EditRefusedError('busy', `row ${row}'s job is ${state}: wait for it to finish`);
    }
  }

  const state = reviewCreate ? 'sent' : 'pending';
  const reopened: LedgerEntry = {
    cells: maskCells(plan, cells),
    job: jobName,
    status: state,
    attempts: entry.attempts,
    lastAttemptAt: entry.lastAttemptAt,
    // The customers an upsert found before its first attempt prove a later match new; only a row that may have been sent keeps them.
    preexisting: reviewCreate ? entry.preexisting : undefined,
    // The row now has a job of its own: its batch, if it ever runs again, leaves the row to that job.
    handed: true,
  };
  // Reopening is the lock: it only takes a settled row, so of two racing edits (or an edit and a retry) one wins.
  const round = await store.reopenRow(importId, row, reopened);
  if (round === undefined) throw new EditRefusedError('busy', `row ${row} is no longer settled: it was retried meanwhile`);
  // Found by its new values too (a search checks each hit against the row as it is now).
  await store.addSearchTerms(importId, new Map(rowTermDigests(searchableCells(plan, reopened.cells)).map((digest) => [digest, [row]])));

  const data: RowJobData = { importId, row };
  // (A customers row without a password has nothing to seal.)
  if (Object.values(secrets).some((value) => value !== '') && keyring) data.secrets = sealSecrets(keyring, secrets);
  try {
    const stale = await getRowJob(queues, importId, row);
    if (stale) await stale.remove();
    await queues.rows.add(jobName, data, rowJobOptions(importId, row, record.options.attempts));
  } catch (error) {
    // Put the row back as it was, so it is neither lost nor stuck pending without a job.
    const restored = await store.settle(importId, row, entry);
    if (restored.complete) await enqueueFinalize(queues, importId, restored.round);
    throw error;
  }
  return { row, jobName, state, round };
}

/** The card fields an edit form of this row asks for. */
export async function cardFieldsOf(store: ImportStore, queues: Queues, keyring: CardKeyring | undefined, importId: string, row: number): Promise<CardFields> {
  const record = await store.getImport(importId);
  if (!record) throw new EditRefusedError('no-import', `no import ${importId}`);
  const plan = planOf(record);
  const columns = secretColumnsOf(plan);
  let sealed: Record<string, string> = {};
  if ((columns.accountNumber !== undefined || columns.password !== undefined) && keyring) {
    const job = await getRowJob(queues, importId, row);
    sealed = job?.data.secrets === undefined ? {} : openSecrets(keyring, job.data.secrets);
  }
  const held = columns.accountNumber !== undefined && sealed[String(columns.accountNumber)] !== undefined;
  const passwordHeld = columns.password !== undefined && (sealed[String(columns.password)] ?? '') !== '';
  const entry = columns.password === undefined || passwordHeld ? undefined : await store.getRow(importId, row);
  const hadPassword = entry !== undefined && columns.password !== undefined && (alignedCells(plan, entry)[columns.password] ?? '') !== '';
  return {
    accountNumber: columns.accountNumber !== undefined,
    accountNumberNeeded: columns.accountNumber !== undefined && !held,
    cvCode: columns.cvCode !== undefined,
    password: columns.password !== undefined,
    passwordNeeded: hadPassword,
    passwordHeld,
  };
}

/** The row's cells laid on the header's columns (a `column-count` row had more or fewer). */
export function alignedCells(plan: ColumnPlan, entry: LedgerEntry): string[] {
  return plan.headers.map((_, column) => entry.cells[column] ?? '');
}

async function editableRow(store: ImportStore, importId: string, row: number): Promise<{ record: ImportRecord; entry: LedgerEntry; plan: ColumnPlan }> {
  const record = await store.getImport(importId);
  if (!record) throw new EditRefusedError('no-import', `no import ${importId}`);
  const entry = await store.getRow(importId, row);
  if (!entry) throw new EditRefusedError('no-row', `import ${importId} has no row ${row}`);
  if (!PROBLEM_STATUSES.has(entry.status as RowStatus)) {
    throw new EditRefusedError('not-editable', `row ${row} is ${entry.status}; only invalid, failed and needs-review rows are edited`);
  }
  return { record, entry, plan: planOf(record) };
}

interface SecretColumns {
  accountNumber: number | undefined;
  cvCode: number | undefined;
  password: number | undefined;
}

function secretColumnsOf(plan: ColumnPlan): SecretColumns {
  const paths = secretPaths(plan.kind);
  return { accountNumber: paths && plan.index.get(paths.accountNumber), cvCode: paths && plan.index.get(paths.cvCode), password: passwordColumn(plan) };
}

/** The row of a customers file had a password (its ledger holds the mask): it is sent only with the sealed one. */
export function hadPassword(record: ImportRecord, entry: LedgerEntry): boolean {
  const column = passwordColumn(planOf(record));
  return column !== undefined && (entry.cells[column] ?? '') !== '';
}

/** A needs-review create: it may have been applied, so it reads back before anything is sent again. */
const mayHaveBeenCreated = (entry: LedgerEntry): boolean => entry.status === 'needs-review' && entry.job !== null && ROW_JOBS[entry.job].readBack !== undefined;

/**
 * The paths of a row that an edit may not change: for a needs-review create,
 * those reading back compares (jobs/reconcile.ts, jobs/customerUpsert.ts)
 * and CustomerID, which would turn the create into an update; none otherwise.
 */
export function lockedPaths(record: Pick<ImportRecord, 'kind' | 'options'>, entry: LedgerEntry): string[] {
  if (!mayHaveBeenCreated(entry)) return [];
  const fields = ['FirstName', 'LastName', 'EmailAddress'];
  if (record.kind === 'signups') return fields.map(signupCustomerPath);
  return [...fields, CUSTOMER_ID, ...(record.options.match ? [record.options.match] : [])];
}

/**
 * The plaintext card cells and password of the edited row, by column index:
 * the card number given, else the one still sealed in the row's job; the CVC
 * given, else blank; the password given, else the one sealed, else blank
 * when the row had none.
 */
function cardCells(
  keyring: CardKeyring | undefined,
  plan: ColumnPlan,
  columns: SecretColumns,
  sealed: string | undefined,
  card: CardInput | undefined,
  row: number,
  entry: LedgerEntry,
): Record<string, string> {
  const given = (value: string | undefined): string | undefined => (value === undefined || value.trim() === '' ? undefined : value.trim());
  if (columns.cvCode === undefined && given(card?.CVCode) !== undefined) throw new EditRefusedError('unknown-column', `${plan.kind} file has no CVCode column`);
  if (columns.accountNumber === undefined && given(card?.AccountNumber) !== undefined) throw new EditRefusedError('unknown-column', `${plan.kind} file has no card number column`);
  if (columns.password === undefined && (card?.Password ?? '') !== '') throw new EditRefusedError('unknown-column', `${plan.kind} file has no Password column`);
  if (columns.password !== undefined) return passwordCell(keyring, columns.password, sealed, card?.Password, row, entry);
  if (columns.accountNumber === undefined && columns.cvCode === undefined) return {};
  if (!keyring) throw new EditRefusedError('no-card-key', 'this row holds card data, which is only queued encrypted: set SUBSYNC_CARD_KEY');
  const cells: Record<string, string> = {};
  if (columns.accountNumber !== undefined) {
    const held = sealed === undefined ? undefined : openSecrets(keyring, sealed)[String(columns.accountNumber)];
    const number = given(card?.AccountNumber) ?? held;
    if (number === undefined) throw new EditRefusedError('card-needed', `row ${row}'s card number is no longer held: enter it again`);
    cells[String(columns.accountNumber)] = number;
  }
  if (columns.cvCode !== undefined) cells[String(columns.cvCode)] = given(card?.CVCode) ?? '';
  return cells;
}

/**
 * The password of an edited customers row, by column index: the one typed
 * (as typed: a password's spaces may be meant), else the one sealed in the
 * row's job, else blank when the row had none; a row that had one that is no
 * longer held is refused, rather than sent blank or as the mask.
 */
function passwordCell(keyring: CardKeyring | undefined, column: number, sealed: string | undefined, typed: string | undefined, row: number, entry: LedgerEntry): Record<string, string> {
  const held = sealed === undefined || !keyring ? undefined : openSecrets(keyring, sealed)[String(column)];
  const password = typed !== undefined && typed !== '' ? typed : held;
  if (password !== undefined && password !== '') {
    if (!keyring) throw new EditRefusedError('no-card-key', 'a password is only queued encrypted: set SUBSYNC_CARD_KEY');
    return { [String(column)]: password };
  }
  if ((entry.cells[column] ?? '') !== '') throw new EditRefusedError('password-needed', `row ${row}'s password is no longer held: enter it again`);
  return { [String(column)]: '' };
}
