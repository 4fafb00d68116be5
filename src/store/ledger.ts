import { z } from 'zod';
import { JOB_NAMES, ROW_STATUSES, type JobName, type RowOutcome, type RowStatus } from '../outcomes.js';

/**
 * A row's entry in an import's ledger, as the rest of subsync reads and
 * writes it. Redis holds it in a compact encoding (one-letter keys, below):
 * this module alone knows that encoding, and the store encodes and decodes
 * at its boundary.
 *
 * A row's state is `pending` (nothing of it can have reached the service:
 * never sent, or proven not applied), `sent` (a request may have left, so
 * the next attempt reads back before sending again), or a settled
 * RowStatus. The fields of its outcome (customerId, note, ...) are those of
 * RowOutcome (src/outcomes.ts).
 */
export interface LedgerEntry extends Omit<RowOutcome, 'status'> {
  /** The input row's cells, card data masked. */
  cells: string[];
  /** The job that runs the row; null for an invalid row, which never runs. */
  job: JobName | null;
  status: RowState;
  /** Attempts made (requests sent or tried), for results.csv. */
  attempts: number;
  /** Epoch ms of the last attempt. */
  lastAttemptAt?: number;
  /** Upsert: customers that matched before the first attempt, so a later match is proven new. */
  preexisting?: readonly string[];
  /**
   * Handed from its batch job to a job of its own (a retry, or a failed job
   * kept for the dashboard): a batch run again leaves the row to that job.
   */
  handed?: boolean;
  /**
   * Claimed: a run is attempting the row (an update, whose request is never
   * marked `sent`), so a cancel leaves it to that run (src/import/control.ts).
   */
  claimed?: boolean;
}

export const UNSETTLED_STATES = ['pending', 'sent'] as const;
export type RowState = (typeof UNSETTLED_STATES)[number] | RowStatus;

export const isSettled = (state: RowState): state is RowStatus => state !== 'pending' && state !== 'sent';

/**
 * A copy of `entry` with `fields` changed. Every copy has every field, in
 * one order (those it lacks undefined), so entries keep one shape: on the
 * worker's hot path a row's entry is copied three to five times, and a
 * spread (`{ ...entry, status }`) of the decoded entries' varied shapes
 * cost about 3 µs a copy, this about a tenth of that.
 */
export function entryWith(entry: LedgerEntry, fields: Partial<LedgerEntry>): LedgerEntry {
  const copy: LedgerEntry = {
    cells: entry.cells,
    job: entry.job,
    status: entry.status,
    attempts: entry.attempts,
    lastAttemptAt: entry.lastAttemptAt,
    preexisting: entry.preexisting,
    handed: entry.handed,
    claimed: entry.claimed,
    customerId: entry.customerId,
    subscriptionId: entry.subscriptionId,
    paymentMethodKey: entry.paymentMethodKey,
    note: entry.note,
    candidates: entry.candidates,
  };
  return Object.assign(copy, fields);
}

/** The entry with `outcome` as its status and outcome fields (those it does not name are cleared). */
export function withOutcome(entry: LedgerEntry, outcome: RowOutcome): LedgerEntry {
  return entryWith(entry, {
    status: outcome.status,
    customerId: outcome.customerId,
    subscriptionId: outcome.subscriptionId,
    paymentMethodKey: outcome.paymentMethodKey,
    note: outcome.note,
    candidates: outcome.candidates,
  });
}

/** The outcome an entry holds; undefined while it is unsettled. */
export function outcomeOf(entry: LedgerEntry): RowOutcome | undefined {
  if (!isSettled(entry.status)) return undefined;
  return {
    status: entry.status,
    customerId: entry.customerId,
    subscriptionId: entry.subscriptionId,
    paymentMethodKey: entry.paymentMethodKey,
    note: entry.note,
    candidates: entry.candidates,
  };
}

/**
 * The encoding in Redis: short keys, since a ledger holds an entry per row
 * of every import kept. The Lua scripts of importStore.ts read `s`.
 */
const StoredEntrySchema = z.object({
  c: z.array(z.string()),
  j: z.enum(JOB_NAMES).nullable(),
  s: z.enum([...UNSETTLED_STATES, ...ROW_STATUSES]),
  a: z.number().int().min(0),
  cid: z.string().optional(),
  sid: z.string().optional(),
  pmk: z.string().optional(),
  e: z.string().optional(),
  t: z.number().optional(),
  pre: z.array(z.string()).optional(),
  cand: z.array(z.string()).optional(),
  h: z.literal(1).optional(),
  f: z.literal(1).optional(),
});

/**
 * The entry as stored: JSON of its compact form (undefined fields left out).
 * With a run's claim (a sent mark), the entry is `sent` and holds, in Redis
 * only, the run's token (`k`) and its job lock's key (`l`). The fields the
 * scripts read (state, cancel flag, claim) come first, before the cells:
 * the scripts find them without scanning the row (READ_ENTRY_LUA).
 */
export function encodeEntry(entry: LedgerEntry, claim?: { token: string; lockKey: string }): string {
  // Built by hand, byte for byte what JSON.stringify of the compact object (keys in this order, undefined
  // ones left out) gives. The cells' JSON is made afresh each time: keeping it per array (a WeakMap, and a
  // copy of the values to tell a changed array) cost three times what it saved.
  let text = claim ? '{"s":"sent"' : `{"s":${JSON.stringify(entry.status)}`;
  if (entry.claimed) text += ',"f":1';
  if (claim) text += `,"k":${JSON.stringify(claim.token)},"l":${JSON.stringify(claim.lockKey)}`;
  text += `,"c":${JSON.stringify(entry.cells)},"j":${JSON.stringify(entry.job)},"a":${JSON.stringify(entry.attempts)}`;
  if (entry.customerId !== undefined) text += `,"cid":${JSON.stringify(entry.customerId)}`;
  if (entry.subscriptionId !== undefined) text += `,"sid":${JSON.stringify(entry.subscriptionId)}`;
  if (entry.paymentMethodKey !== undefined) text += `,"pmk":${JSON.stringify(entry.paymentMethodKey)}`;
  if (entry.note !== undefined) text += `,"e":${JSON.stringify(entry.note)}`;
  if (entry.lastAttemptAt !== undefined) text += `,"t":${JSON.stringify(entry.lastAttemptAt)}`;
  if (entry.preexisting !== undefined) text += `,"pre":${JSON.stringify(entry.preexisting)}`;
  if (entry.candidates !== undefined) text += `,"cand":${JSON.stringify(entry.candidates)}`;
  if (entry.handed) text += ',"h":1';
  return `${text}}`;
}

/**
 * Lua: `readEntry(text)` reads what the scripts decide from in a stored
 * entry, its state (`s`), claim (`k`, `l`) and cancel flag (`f`), as a table
 * {s, k, l, f (true or nil)}; nil for no entry (false, as HMGET answers it).
 * The claim is read only from a `sent` entry (the scripts look at no other's).
 *
 * Read with plain string searches, not cjson nor patterns (each cost the
 * scripts about as much as all their commands for the row). Exact in any
 * key order: the entry is one object whose other values are strings,
 * numbers and arrays of strings, so without a backslash in the text (no
 * escaped quote in any string) `"s":"` can only be the key s, and so for k,
 * l and f (whose only value is 1). A text with a backslash anywhere is
 * decoded by cjson.
 */
export const READ_ENTRY_LUA = `
local function textField(text, key)
  local at = string.find(text, key, 1, true)
  if not at then return nil end
  local from = at + #key
  return string.sub(text, from, string.find(text, '"', from, true) - 1)
end
local function readEntry(text)
  if not text then return nil end
  if string.find(text, '\\\\', 1, true) then
    local e = cjson.decode(text)
    return {s = e.s, k = type(e.k) == 'string' and e.k or nil, l = type(e.l) == 'string' and e.l or nil, f = e.f == 1 or nil}
  end
  local entry = {s = textField(text, '"s":"'), f = string.find(text, '"f":1', 1, true) ~= nil or nil}
  if entry.s == 'sent' then
    entry.k = textField(text, '"k":"')
    entry.l = textField(text, '"l":"')
  end
  return entry
end`;

/** An entry read from Redis; throws when the text is not one. */
export function decodeEntry(text: string): LedgerEntry {
  const value: unknown = JSON.parse(text);
  // A batch reads 25 entries a run: the common shape is checked by hand, the schema says what is wrong otherwise.
  const stored = isStoredEntry(value) ? value : StoredEntrySchema.parse(value);
  // Every field set, in entryWith's order: every entry one shape.
  const entry: LedgerEntry = {
    cells: stored.c,
    job: stored.j,
    status: stored.s,
    attempts: stored.a,
    lastAttemptAt: stored.t,
    preexisting: stored.pre,
    handed: stored.h === undefined ? undefined : true,
    claimed: stored.f === undefined ? undefined : true,
    customerId: stored.cid,
    subscriptionId: stored.sid,
    paymentMethodKey: stored.pmk,
    note: stored.e,
    candidates: stored.cand,
  };
  return entry;
}

type StoredEntry = z.infer<typeof StoredEntrySchema>;
const JOBS: ReadonlySet<unknown> = new Set(JOB_NAMES);
const STATES: ReadonlySet<unknown> = new Set([...UNSETTLED_STATES, ...ROW_STATUSES]);
const isText = (v: unknown): boolean => typeof v === 'string';
const isTexts = (v: unknown): boolean => Array.isArray(v) && v.every(isText);

/**
 * What StoredEntrySchema accepts (and only that; other keys are left out by
 * decodeEntry as by the schema), without a parse: the hot path's check. A
 * field added to the schema is added here, or every entry that has it takes
 * the slow path (still right).
 */
function isStoredEntry(value: unknown): value is StoredEntry {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const v = value as Record<string, unknown>;
  return (
    isTexts(v.c) &&
    (v.j === null || JOBS.has(v.j)) &&
    STATES.has(v.s) &&
    Number.isSafeInteger(v.a) && (v.a as number) >= 0 &&
    (v.cid === undefined || isText(v.cid)) &&
    (v.sid === undefined || isText(v.sid)) &&
    (v.pmk === undefined || isText(v.pmk)) &&
    (v.e === undefined || isText(v.e)) &&
    (v.t === undefined || (typeof v.t === 'number' && Number.isFinite(v.t))) &&
    (v.pre === undefined || isTexts(v.pre)) &&
    (v.cand === undefined || isTexts(v.cand)) &&
    (v.h === undefined || v.h === 1) &&
    (v.f === undefined || v.f === 1)
  );
}
