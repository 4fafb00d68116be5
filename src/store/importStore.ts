import type { RedisClient } from '../redis/redis.js';
import { z } from 'zod';
import { IMPORT_KINDS, ROW_STATUSES, type ImportKind, type JobName, type RowStatus } from '../outcomes.js';
import { storeKeys } from '../redis/keys.js';
import { HASH_MANY_LUA, luaScript } from '../redis/script.js';
import { decodeEntry, encodeEntry, READ_ENTRY_LUA, type LedgerEntry, type RowState } from './ledger.js';
import { ADD_TERMS_LUA, digestBytes, idTerm, TERM_DIGEST_BYTES, termDigest } from './searchIndex.js';
import { STAMP_SERIES_LUA } from './series.js';

/**
 * The import state in Redis: one record per import, and a
 * durable per-row ledger separate from the BullMQ jobs, so that a removed or
 * re-added job can never make a settled row run again.
 *
 * Ledger entries (src/store/ledger.ts, encoded there): `pending`, `sent`, or
 * a settled RowStatus. Only the run holding a row writes an unsettled entry
 * (src/rows/); settling is one Lua script, so counts move exactly once.
 *
 * A `sent` entry also holds, in Redis only, its claim: the token of the run
 * that marked it (`k`) and the key of that run's job lock (`l`). The claim
 * holds while that lock holds that token: no other run may send the row
 * meanwhile, and a run that lost its lock may write nothing unsettled.
 */

export { UNSETTLED_STATES, isSettled, type LedgerEntry, type RowState } from './ledger.js';

export const ImportOptionsSchema = z.object({
  /** Upsert match field (`--match`), a customer field path. */
  match: z.string().optional(),
  expiryFormat: z.enum(['MMYY', 'YYMM']),
  /** Attempts per row, the first included. */
  attempts: z.number().int().min(1),
  /** `--allow-duplicates`: rows about a person the service or the file already holds are sent all the same. */
  allowDuplicates: z.boolean().optional(),
});
export type ImportOptions = z.infer<typeof ImportOptionsSchema>;


const json = <T extends z.ZodType>(schema: T) => z.string().transform((text, ctx) => {
  try {
    return schema.parse(JSON.parse(text)) as z.infer<T>;
  } catch {
    ctx.addIssue({ code: 'custom', message: 'not the expected JSON' });
    return z.NEVER;
  }
});
const optionalNumber = z.string().optional().transform((v) => (v === undefined || v === '' ? undefined : Number(v)));

const ImportRecordHashSchema = z.object({
  id: z.string(),
  file: z.string(),
  kind: z.enum(IMPORT_KINDS),
  headers: json(z.array(z.string())),
  paths: json(z.array(z.string())),
  options: json(ImportOptionsSchema),
  createdAt: z.coerce.number(),
  state: z.enum(['enqueuing', 'enqueued']),
  total: optionalNumber,
  round: z.coerce.number().int(),
  lastSettledAt: optionalNumber,
  finishedAt: optionalNumber,
  resultsDir: z.string().optional(),
  /** Epoch ms since when the import is in read-back mode: Redis lost writes while it ran (src/store/rollback.ts). */
  readBack: z.coerce.number().optional(),
  /** Rows per batch job (src/queue/queues.ts batchRowsOf); absent in an import enqueued before it was recorded. */
  batchRows: optionalNumber,
});

/**
 * One import: the file as the operator named it, its kind, its header cells
 * and the body paths they map to (same index), options; `state` is
 * `enqueuing` until the producer has added every row, when `total` is known;
 * `round` is bumped each time settled rows are reopened for retry (one set of
 * results per round).
 */
export type ImportRecord = z.output<typeof ImportRecordHashSchema>;

/** Counts of an import: by status, settled, and its API figures. */
export interface ImportCounts {
  byStatus: Record<RowStatus, number>;
  settled: number;
  apiCalls: number;
  retries: number;
  rateLimited: number;
  /** Of apiCalls: searches of customers and reads of one record; the rest are writes. */
  searches: number;
  reads: number;
}

// Lua: whether a sent row's claim is held by a live run other than `token` (its job lock still holds its token).
// `entry` as readEntry (src/store/ledger.ts) reads it.
const CLAIMED_BY_OTHER_LUA = `
local function claimedByOther(entry, token)
  if entry.s ~= 'sent' or entry.k == nil or entry.k == token then return false end
  return entry.l ~= nil and redis.call('GET', entry.l) == entry.k
end`;

// Lua: the rollback counter (src/store/rollback.ts), bumped once per mark or settle call and returned to the caller.
const SEQ_LUA = `
local function bumpSeq(key) return redis.call('INCR', key) end`;

// Lua: the entries of a call's rows, read in one HMGET, and the entries the call writes, kept in the
// script's memory and written in one HSET at its end: a row named twice in one call sees what the call
// wrote before, as if each were written at once. `rowsOf(from, step)` reads ARGV[from], ARGV[from + step], ...
const CALL_ROWS_LUA = `${HASH_MANY_LUA}
local function rowsOf(from, step)
  local rows = {}
  for i = from, #ARGV, step do rows[#rows + 1] = ARGV[i] end
  local stored = hmgetMany(KEYS[1], rows)
  local written, flat = {}, {}
  local self = {}
  -- The row's entry as the call sees it (n: its place in the call).
  function self.text(n, row)
    local text = written[row]
    if text == nil then text = stored[n] end
    return text
  end
  function self.write(row, text)
    written[row] = text
    flat[#flat + 1] = row
    flat[#flat + 1] = text
  end
  function self.flush() hsetMany(KEYS[1], flat) end
  return self
end`;

/**
 * Lua: the run id of the Redis server running the script; and whether it is other than the one the fleet
 * last checked (`checked-run`, src/store/rollback.ts): a restart or failover nobody has handled yet. No
 * key (a store without a rollback watch) is no restart.
 */
export const SERVER_RUN_LUA = `
local function serverRun() return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') end
local function unchecked(key)
  local checked = redis.call('GET', key)
  return checked and checked ~= serverRun()
end`;

// Settles rows once each: refuses an entry already settled, so counts move once, and an entry
// whose sent claim another live run holds (token '' settles whatever the claim: producer, sweep, dashboard).
// The runs' API figures are added either way (the calls were made). In the same call: the rows
// settled and the 429s go into the import's series (src/store/series.ts), and the ids the service
// answered into its search index (src/store/searchIndex.ts). Counts move by one HINCRBY per status
// per call, not two per row.
// KEYS: ledger, counts, record, series, search index, seq.
// ARGV: now, apiCalls, retries, rateLimited, searches, reads, then (row, entry JSON, status, term digests end to end, token) per row.
// Returns {settled, total, round, seq, per row 1 (applied), 0 (settled already) or 2 (another live run's claim)}.
const SETTLE_ROWS_SCRIPT = `${READ_ENTRY_LUA}${CLAIMED_BY_OTHER_LUA}${SEQ_LUA}${CALL_ROWS_LUA}
${STAMP_SERIES_LUA}
${ADD_TERMS_LUA}
local function add(field, by)
  local n = tonumber(by or '0')
  if n ~= 0 then redis.call('HINCRBY', KEYS[2], field, n) end
end
add('apiCalls', ARGV[2])
add('retries', ARGV[3])
add('rateLimited', ARGV[4])
add('searches', ARGV[5])
add('reads', ARGV[6])
local reply = {0, 0, 0, bumpSeq(KEYS[6])}
local rows = rowsOf(7, 5)
local applied, n = 0, 0
local statuses, byStatus = {}, {}
local terms = {}
for i = 7, #ARGV, 5 do
  n = n + 1
  local entry = readEntry(rows.text(n, ARGV[i]))
  if entry and entry.s ~= 'pending' and entry.s ~= 'sent' then
    reply[#reply + 1] = 0
  elseif entry and ARGV[i + 4] ~= '' and claimedByOther(entry, ARGV[i + 4]) then
    reply[#reply + 1] = 2
  else
    rows.write(ARGV[i], ARGV[i + 1])
    local status = ARGV[i + 2]
    if byStatus[status] == nil then
      statuses[#statuses + 1] = status
      byStatus[status] = 0
    end
    byStatus[status] = byStatus[status] + 1
    if ARGV[i + 3] ~= '' then
      for j = 1, #ARGV[i + 3], ${TERM_DIGEST_BYTES} do
        terms[#terms + 1] = string.sub(ARGV[i + 3], j, j + ${TERM_DIGEST_BYTES - 1})
        terms[#terms + 1] = ARGV[i]
      end
    end
    applied = applied + 1
    reply[#reply + 1] = 1
  end
end
rows.flush()
for _, status in ipairs(statuses) do redis.call('HINCRBY', KEYS[2], status, byStatus[status]) end
if #terms > 0 then addTerms(KEYS[5], terms) end
local record = redis.call('HMGET', KEYS[3], 'createdAt', 'total', 'round')
local settled
if applied > 0 then
  settled = redis.call('HINCRBY', KEYS[2], 'settled', applied)
  redis.call('HSET', KEYS[3], 'lastSettledAt', ARGV[1])
else
  settled = tonumber(redis.call('HGET', KEYS[2], 'settled') or '0')
end
stamp(KEYS[4], KEYS[3], tonumber(ARGV[1]), applied, tonumber(ARGV[4] or '0'), record[1] or false)
reply[1] = settled
reply[2] = tonumber(record[2] or '-1')
reply[3] = tonumber(record[3] or '0')
return reply
`;

// Lua: whether a cancel refuses a write that takes a row (marks it sent, or claims it): while the import is
// cancelling (`cancelling()`, its run state read once per call and only when a row needs it), a row that is
// pending and unclaimed (or has no entry) is refused, so a row is either cancelled or sent, never both
// (src/import/runState.ts). KEYS[RUN_KEY] is the run state.
const CANCEL_REFUSES_LUA = `
local cancellingNow = nil
local function cancelling()
  if cancellingNow == nil then
    local state = redis.call('HGET', KEYS[RUN_KEY], 'state')
    cancellingNow = state == 'cancelling' or state == 'cancelled'
  end
  return cancellingNow
end
local function cancelRefuses(current)
  if not current then return true end
  return current.s == 'pending' and not current.f
end`;

// Writes unsettled entries, each unless its row has settled meanwhile (or a cancel refuses it), or another
// live run holds its sent claim; with a run's token and lock (ARGV[1], ARGV[2]), none unless the run still
// holds its lock. A run never writes a sent row back to pending but when the mark is its own (its request proved
// not applied): a run writing an entry it read before the row became sent (a rollback's read-back mode, another
// run's mark) would otherwise let the next run create without reading back; it stays sent.
// KEYS: ledger, run state, seq. ARGV: token or '', lock key or '', then (row, entry JSON) per row.
// Returns {seq, per row 1 (written), 0 (settled, or refused by a cancel), 2 (another live run's claim) or 3 (the run lost its lock)}.
const UPDATE_UNSETTLED_SCRIPT = `local RUN_KEY = 2
${READ_ENTRY_LUA}${CLAIMED_BY_OTHER_LUA}${CANCEL_REFUSES_LUA}${SEQ_LUA}${CALL_ROWS_LUA}
local reply = {bumpSeq(KEYS[3])}
if ARGV[2] ~= '' and redis.call('GET', ARGV[2]) ~= ARGV[1] then
  for i = 3, #ARGV, 2 do reply[#reply + 1] = 3 end
  return reply
end
-- Whether the entry written takes its row: marks it sent, or claims it.
local function takesRow(text)
  local next = readEntry(text)
  return next.s == 'sent' or next.f == true
end
local rows = rowsOf(3, 2)
local n = 0
for i = 3, #ARGV, 2 do
  n = n + 1
  local entry = readEntry(rows.text(n, ARGV[i]))
  if entry and entry.s ~= 'pending' and entry.s ~= 'sent' then
    reply[#reply + 1] = 0
  elseif entry and claimedByOther(entry, ARGV[1]) then
    reply[#reply + 1] = 2
  elseif cancelling() and takesRow(ARGV[i + 1]) and cancelRefuses(entry) then
    reply[#reply + 1] = 0
  else
    local text = ARGV[i + 1]
    if entry and entry.s == 'sent' and ARGV[1] ~= '' and entry.k ~= ARGV[1] then
      local at = string.find(text, '"s":"pending"', 1, true)
      if at then text = string.sub(text, 1, at - 1) .. '"s":"sent"' .. string.sub(text, at + 13) end
    end
    rows.write(ARGV[i], text)
    reply[#reply + 1] = 1
  end
end
rows.flush()
return reply
`;

// Marks rows sent before their requests leave: a claim held by one run. Refused (nothing written) while a
// detected rollback is being handled, or Redis restarted and nobody has handled that yet (4), when the run no longer holds its job's lock (3), when the row has
// settled (0), or when the row is sent already and this run may not take it (2): another live run holds the
// claim, or this run decided from a pending row (it must read back first). A run that read the row back
// (expect 'sent') takes over the claim of a run whose lock is gone. A cancel refuses a pending row (0).
// KEYS: ledger, seq, hold, run state, checked run. ARGV: token, lock key, then (row, entry JSON, expect) per row.
// Returns {seq, per row 1 (marked) or a refusal code}.
const MARK_SENT_SCRIPT = `local RUN_KEY = 4
${READ_ENTRY_LUA}${CLAIMED_BY_OTHER_LUA}${CANCEL_REFUSES_LUA}${SEQ_LUA}${CALL_ROWS_LUA}${SERVER_RUN_LUA}
local reply = {bumpSeq(KEYS[2])}
local refuse = nil
if redis.call('EXISTS', KEYS[3]) == 1 or unchecked(KEYS[5]) then refuse = 4
elseif redis.call('GET', ARGV[2]) ~= ARGV[1] then refuse = 3 end
if refuse then
  for i = 3, #ARGV, 3 do reply[#reply + 1] = refuse end
  return reply
end
local rows = rowsOf(3, 3)
local n = 0
for i = 3, #ARGV, 3 do
  n = n + 1
  local entry = readEntry(rows.text(n, ARGV[i]))
  if entry and entry.s ~= 'pending' and entry.s ~= 'sent' then
    reply[#reply + 1] = 0
  elseif entry and entry.s == 'sent' and entry.k ~= ARGV[1] and (ARGV[i + 2] ~= 'sent' or claimedByOther(entry, ARGV[1])) then
    reply[#reply + 1] = 2
  elseif cancelling() and cancelRefuses(entry) then
    reply[#reply + 1] = 0
  else
    rows.write(ARGV[i], ARGV[i + 1])
    reply[#reply + 1] = 1
  end
end
rows.flush()
return reply
`;

// Settles rows of a cancelled import as \`cancelled\`: only a row that is pending (never sent), and with
// mode 'unclaimed' only one no worker has claimed. The entry is kept as it is but for its state.
// KEYS: ledger, counts, record. ARGV: now, mode ('unclaimed' or 'pending'), rows.
// Returns {settled, total, round, applied per row (1 or 0)}.
const SETTLE_CANCELLED_SCRIPT = `
local reply = {0, 0, 0}
local any = false
for i = 3, #ARGV do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  local applied = 0
  if current then
    local c = cjson.decode(current)
    if c.s == 'pending' and c.j ~= cjson.null and (ARGV[2] == 'pending' or c.f ~= 1) then
      local at = string.find(current, '"s":"pending"', 1, true)
      if at then
        redis.call('HSET', KEYS[1], ARGV[i], string.sub(current, 1, at - 1) .. '"s":"cancelled"' .. string.sub(current, at + 13))
        redis.call('HINCRBY', KEYS[2], 'cancelled', 1)
        redis.call('HINCRBY', KEYS[2], 'settled', 1)
        any = true
        applied = 1
      end
    end
  end
  reply[#reply + 1] = applied
end
if any then redis.call('HSET', KEYS[3], 'lastSettledAt', ARGV[1]) end
reply[1] = tonumber(redis.call('HGET', KEYS[2], 'settled') or '0')
reply[2] = tonumber(redis.call('HGET', KEYS[3], 'total') or '-1')
reply[3] = tonumber(redis.call('HGET', KEYS[3], 'round') or '0')
return reply
`;

// Reopens a settled row for retry: takes it out of its count, starts a new round.
// KEYS: ledger, counts, record. ARGV: row, entry JSON.
const REOPEN_SCRIPT = `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return -1 end
local s = cjson.decode(current).s
if s == 'pending' or s == 'sent' then return 0 end
redis.call('HINCRBY', KEYS[2], s, -1)
redis.call('HINCRBY', KEYS[2], 'settled', -1)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[3], 'finishedAt', 'resultsDir')
-- Unfinished again: its data no longer expires.
for i = 1, #KEYS do redis.call('PERSIST', KEYS[i]) end
return redis.call('HINCRBY', KEYS[3], 'round', 1)
`;

// Marks the current round finished and sets the import's keys to expire. Only the current round:
// a retry meanwhile started another. KEYS: record, then every other key of the import.
// ARGV: round, finishedAt, resultsDir, retention in seconds. Returns 1 when marked.
const MARK_FINISHED_SCRIPT = `
if redis.call('HGET', KEYS[1], 'round') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'finishedAt', ARGV[2], 'resultsDir', ARGV[3])
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
return 1
`;

// Writes the entries of rows that have none (a resumed producer keeps what is there): as HSETNX each,
// in one HMGET and one HSET. KEYS: ledger. ARGV: row, entry JSON, row, entry JSON, ...
const PUT_PENDING_ROWS_SCRIPT = `${CALL_ROWS_LUA}
local rows = rowsOf(1, 2)
local n = 0
for i = 1, #ARGV, 2 do
  n = n + 1
  if not rows.text(n, ARGV[i]) then rows.write(ARGV[i], ARGV[i + 1]) end
end
rows.flush()
return 0
`;

// Records the total once every row is in; returns how many have settled.
// KEYS: record, counts. ARGV: total.
const MARK_ENQUEUED_SCRIPT = `
redis.call('HSET', KEYS[1], 'total', ARGV[1], 'state', 'enqueued')
return {tonumber(redis.call('HGET', KEYS[2], 'settled') or '0'), tonumber(redis.call('HGET', KEYS[1], 'round') or '0')}
`;

// Adds API figures of runs that settled nothing (a 429, a row handed on), and their 429s to the series.
// KEYS: counts, record, series. ARGV: now, apiCalls, retries, rateLimited, searches, reads.
const ADD_FIGURES_SCRIPT = `${STAMP_SERIES_LUA}
local fields = {'apiCalls', 'retries', 'rateLimited', 'searches', 'reads'}
for i = 1, #fields do
  local n = tonumber(ARGV[i + 1] or '0')
  if n ~= 0 then redis.call('HINCRBY', KEYS[1], fields[i], n) end
end
stamp(KEYS[3], KEYS[2], tonumber(ARGV[1]), 0, tonumber(ARGV[4] or '0'))
return 0
`;

// Adds rows to search terms (the producer's, per flush). KEYS: search index. ARGV: the term digests end to end,
// then each term's rows comma-separated, in the same order.
const ADD_SEARCH_TERMS_SCRIPT = `${HASH_MANY_LUA}${ADD_TERMS_LUA}
local packed, adds = ARGV[1], {}
for i = 2, #ARGV do
  local at = (i - 2) * ${TERM_DIGEST_BYTES} + 1
  adds[#adds + 1] = string.sub(packed, at, at + ${TERM_DIGEST_BYTES - 1})
  adds[#adds + 1] = ARGV[i]
end
addTerms(KEYS[1], adds)
return 0
`;

const settleRowsScript = luaScript(SETTLE_ROWS_SCRIPT);
const settleCancelledScript = luaScript(SETTLE_CANCELLED_SCRIPT);
const addFiguresScript = luaScript(ADD_FIGURES_SCRIPT);
const addSearchTermsScript = luaScript(ADD_SEARCH_TERMS_SCRIPT);
const updateUnsettledScript = luaScript(UPDATE_UNSETTLED_SCRIPT);
const markSentScript = luaScript(MARK_SENT_SCRIPT);
const reopenScript = luaScript(REOPEN_SCRIPT);
const markEnqueuedScript = luaScript(MARK_ENQUEUED_SCRIPT);
const markFinishedScript = luaScript(MARK_FINISHED_SCRIPT);
const putPendingRowsScript = luaScript(PUT_PENDING_ROWS_SCRIPT);

/** The API figures of one job run, summed into its import's counts. */
export interface RunFigures {
  apiCalls: number;
  retries: number;
  rateLimited: number;
  /** Of apiCalls: searches and reads (the rest are writes). */
  searches: number;
  reads: number;
}
export const NO_FIGURES: RunFigures = { apiCalls: 0, retries: 0, rateLimited: 0, searches: 0, reads: 0 };

/**
 * The run that writes a row: the token BullMQ gave its job for this run and
 * the key of that job's lock. Its sent marks are claims; its writes are
 * refused once the lock no longer holds its token (the run lost its job).
 */
export interface RunClaim {
  token: string;
  lockKey: string;
}

/**
 * Told of the rollback counter's value returned by every mark and settle
 * (src/store/rollback.ts): `high()` when the call leaves, `saw()` with what
 * came back. A value not above what was seen before the call means Redis
 * lost acknowledged writes.
 */
export interface SeqWatch {
  high(): number;
  /** True when the value shows a rollback (or one is being handled): a mark that came back so must not be sent. */
  saw(seq: number, highBefore: number): boolean;
}

/** Why a mark was refused: nothing may be sent. */
export type MarkRefusal = 'settled' | 'claimed' | 'fenced' | 'held';
/** What marking one row sent did: `marked`, or why not. */
export type MarkResult = 'marked' | MarkRefusal;
const MARK_CODES: Record<number, MarkResult> = { 0: 'settled', 1: 'marked', 2: 'claimed', 3: 'fenced', 4: 'held' };

/** What settling rows told: which of them this call settled, and whether the import is now complete. */
export interface SettleRowsResult {
  applied: boolean[];
  /** Per row: another live run holds its sent claim, so this run's outcome was not written. */
  claimed: boolean[];
  settled: number;
  /** Every row is settled and the total is known: time to write the results. */
  complete: boolean;
  /** The import's current round (retries start new ones), for the finalize job's id. */
  round: number;
}

/** What settling told: whether this call settled the row, and whether the import is now complete. */
export interface SettleResult {
  applied: boolean;
  settled: number;
  /** Every row is settled and the total is known: time to write the results. */
  complete: boolean;
  /** The import's current round (retries start new ones), for the finalize job's id. */
  round: number;
}

export type ImportStore = ReturnType<typeof createImportStore>;

/**
 * `marks`: the connection sent marks are written on (default `redis`): one of
 * their own, so a wait for their durability (src/redis/durable.ts) blocks
 * nothing else.
 */
export function createImportStore(redis: RedisClient, prefix: string, options: { seq?: SeqWatch; marks?: RedisClient } = {}) {
  const keys = storeKeys(prefix);
  let watch = options.seq;
  const marks = options.marks ?? redis;

  /** Runs a mark or settle script whose reply holds the rollback counter at `seqAt`, and tells the watch. */
  async function counted(
    script: typeof settleRowsScript,
    scriptKeys: string[],
    args: ReadonlyArray<string | Buffer>,
    length: number,
    seqAt: number,
    on: RedisClient = redis,
  ): Promise<{ values: number[]; rolledBack: boolean }> {
    const before = watch?.high() ?? 0;
    const values = numbers(await script.run(on, scriptKeys, args), length);
    const rolledBack = watch?.saw(values[seqAt] ?? 0, before) ?? false;
    return { values, rolledBack };
  }

  /**
   * Settles rows in one script call, adding their runs' API figures in the
   * same round trip: a worker settles whatever rows finished together. A
   * row whose sent claim another live run holds is not settled by a run
   * (`claimed`): that run's outcome is the one the ledger will keep.
   */
  async function settleRows(
    importId: string,
    rows: ReadonlyArray<{ row: number; entry: LedgerEntry; claim?: RunClaim }>,
    figures: RunFigures = NO_FIGURES,
    now = Date.now(),
  ): Promise<SettleRowsResult> {
    const args: Array<string | Buffer> = [String(now), String(figures.apiCalls), String(figures.retries), String(figures.rateLimited), String(figures.searches), String(figures.reads)];
    for (const { row, entry, claim } of rows) args.push(String(row), encodeEntry(entry), entry.status, answeredTerms(entry), claim?.token ?? '');
    const keysOfSettle = [keys.ledger(importId), keys.counts(importId), keys.importRecord(importId), keys.series(importId), keys.searchIndex(importId), keys.seq];
    const { values } = await counted(settleRowsScript, keysOfSettle, args, 4 + rows.length, 3);
    const [settled = 0, total = -1, round = 0] = values;
    const codes = values.slice(4);
    const anyApplied = codes.some((a) => a === 1);
    return { applied: codes.map((a) => a === 1), claimed: codes.map((a) => a === 2), settled, complete: anyApplied && total >= 0 && settled === total, round };
  }

  /** Settles one row (see settleRows). */
  async function settle(importId: string, row: number, entry: LedgerEntry, figures: RunFigures = NO_FIGURES, now = Date.now()): Promise<SettleResult> {
    const { applied, claimed: _claimed, ...rest } = await settleRows(importId, [{ row, entry }], figures, now);
    return { applied: applied[0] === true, ...rest };
  }

  /**
   * Writes unsettled entries (back to pending, pre-existing ids, attempts,
   * handed on) in one call; false for a row settled meanwhile, a row whose
   * sent claim another live run holds, and, with a run's claim, every row
   * once that run no longer holds its job's lock.
   */
  async function updateUnsettledRows(importId: string, rows: ReadonlyArray<{ row: number; entry: LedgerEntry }>, claim?: RunClaim): Promise<boolean[]> {
    const args: string[] = [claim?.token ?? '', claim?.lockKey ?? ''];
    for (const { row, entry } of rows) args.push(String(row), encodeEntry(entry));
    const { values } = await counted(updateUnsettledScript, [keys.ledger(importId), keys.runState(importId), keys.seq], args, 1 + rows.length, 0);
    return values.slice(1).map((n) => n === 1);
  }

  /**
   * Marks rows `sent` before their requests leave, each a claim of the run
   * (`claim`): a refused row must not be sent (MarkRefusal says why).
   * `expect` is the state the run decided from: a run that read a `sent` row
   * back may take over the claim of a run that lost its lock; one that saw
   * it `pending` may not, and reads it back first.
   */
  async function markSent(importId: string, rows: ReadonlyArray<{ row: number; entry: LedgerEntry; expect: 'pending' | 'sent' }>, claim: RunClaim): Promise<MarkResult[]> {
    const args: string[] = [claim.token, claim.lockKey];
    // The claim lives in Redis only (k, l beside the entry's fields): entries read back leave it out.
    for (const { row, entry, expect } of rows) args.push(String(row), encodeEntry(entry, claim), expect);
    const { values, rolledBack } = await counted(markSentScript, [keys.ledger(importId), keys.seq, keys.rollbackHold, keys.runState(importId), keys.checkedRun], args, 1 + rows.length, 0, marks);
    // Marked in a Redis that has just shown it lost writes: held like any mark while the rollback is handled.
    return values.slice(1).map((n) => (rolledBack && n === 1 ? 'held' : (MARK_CODES[n] ?? 'fenced')));
  }

  /**
   * Settles rows of a cancelling import as `cancelled`, each only when it is
   * pending (never sent) and, with `unclaimed`, when no worker holds it: the
   * cancel itself takes only those; a worker that finds its row's import
   * cancelling settles the row it holds (`pending`).
   */
  async function settleCancelled(importId: string, rows: readonly number[], mode: 'unclaimed' | 'pending', now = Date.now()): Promise<SettleRowsResult> {
    const reply = await settleCancelledScript.run(redis, [keys.ledger(importId), keys.counts(importId), keys.importRecord(importId)], [String(now), mode, ...rows.map(String)]);
    const values = numbers(reply, 3 + rows.length);
    const [settled = 0, total = -1, round = 0] = values;
    const applied = values.slice(3).map((a) => a === 1);
    return { applied, claimed: applied.map(() => false), settled, complete: applied.some(Boolean) && total >= 0 && settled === total, round };
  }

  return {
    keys,
    /** The connection sent marks go on (for the wait that makes them durable). */
    marks,
    /** The store's connection, for modules keeping their own keys beside an import's (src/import/runState.ts). */
    redis,
    settleCancelled,

    /** Rows that are pending and unclaimed now (a cancel's candidates), read with HSCAN: the import may still be enqueuing. */
    async unclaimedPendingRows(importId: string): Promise<number[]> {
      const found: number[] = [];
      let cursor = '0';
      do {
        const [next, items] = await redis.hscan(keys.ledger(importId), cursor, 'COUNT', 1000);
        cursor = next;
        for (let i = 0; i < items.length; i += 2) {
          const text = items[i + 1] ?? '';
          if (text.includes('"s":"pending"') && !text.includes('"f":1')) found.push(Number(items[i]));
        }
      } while (cursor !== '0');
      return [...new Set(found)].sort((a, b) => a - b);
    },

    /** Creates the record unless one exists; returns the existing one when it does. */
    async createImport(record: Pick<ImportRecord, 'id' | 'file' | 'kind' | 'headers' | 'paths' | 'options' | 'createdAt' | 'state' | 'round'> & { batchRows?: number }): Promise<ImportRecord | undefined> {
      const key = keys.importRecord(record.id);
      const created = await redis.hsetnx(key, 'id', record.id);
      if (created === 0) return this.getImport(record.id);
      await redis
        .multi()
        .hset(key, {
          file: record.file,
          kind: record.kind,
          headers: JSON.stringify(record.headers),
          paths: JSON.stringify(record.paths),
          options: JSON.stringify(record.options),
          createdAt: String(record.createdAt),
          state: record.state,
          round: String(record.round),
          ...(record.batchRows === undefined ? {} : { batchRows: String(record.batchRows) }),
        })
        .zadd(keys.imports, record.createdAt, record.id)
        .exec();
      return undefined;
    },

    async getImport(importId: string): Promise<ImportRecord | undefined> {
      const hash = await redis.hgetall(keys.importRecord(importId));
      if (!hash.state) return undefined;
      return ImportRecordHashSchema.parse(hash);
    },

    /** Import ids, newest first. */
    async listImportIds(limit = 50): Promise<string[]> {
      return redis.zrevrange(keys.imports, 0, limit - 1);
    },

    /** A page of import ids, newest first, from the index of imports by time; and how many the index holds. */
    async importIdsPage(offset: number, limit: number): Promise<{ ids: string[]; indexed: number }> {
      const [ids, indexed] = await Promise.all([redis.zrevrange(keys.imports, offset, offset + limit - 1), redis.zcard(keys.imports)]);
      return { ids, indexed };
    },

    /**
     * The record fields and counts of many imports in one pipelined read, for
     * lists (the headers and paths are not read). Fields as stored (text),
     * with `runState`: the state an operator left it in (paused, cancelling,
     * cancelled), from its run-state hash; undefined for an import whose
     * record is gone (expired).
     */
    async importSummaries(importIds: readonly string[]): Promise<Array<{ record: Record<string, string | undefined>; counts: ImportCounts } | undefined>> {
      if (importIds.length === 0) return [];
      const pipeline = redis.pipeline();
      for (const id of importIds) pipeline.hmget(keys.importRecord(id), ...SUMMARY_FIELDS).hgetall(keys.counts(id)).hget(keys.runState(id), 'state');
      const replies = (await pipeline.exec()) ?? [];
      return importIds.map((_id, i) => {
        const [recordError, fields] = replies[3 * i] ?? [];
        const [countsError, hash] = replies[3 * i + 1] ?? [];
        const [runError, runState] = replies[3 * i + 2] ?? [];
        if (recordError) throw recordError;
        if (countsError) throw countsError;
        if (runError) throw runError;
        const values = Array.isArray(fields) ? fields : [];
        const record: Record<string, string | undefined> = {};
        SUMMARY_FIELDS.forEach((field, j) => {
          const value: unknown = values[j];
          record[field] = typeof value === 'string' ? value : undefined;
        });
        record.runState = typeof runState === 'string' ? runState : undefined;
        if (record.state === undefined) return undefined;
        return { record, counts: countsOf(CountsHashSchema.parse(hash ?? {})) };
      });
    },

    /** Import ids of the list that start with `start` (the imports of one file's bytes: its digest, forced ones after it). */
    async importIdsStartingWith(start: string): Promise<string[]> {
      const found: string[] = [];
      let cursor = '0';
      do {
        const [next, items] = await redis.zscan(keys.imports, cursor, 'MATCH', `${start}*`, 'COUNT', 1000);
        cursor = next;
        for (let i = 0; i < items.length; i += 2) found.push(items[i] as string);
      } while (cursor !== '0');
      return found;
    },

    /** Drops ids from the list of imports (their records expired). */
    async forgetImports(importIds: readonly string[]): Promise<void> {
      if (importIds.length > 0) await redis.zrem(keys.imports, ...importIds);
    },

    /** Drops from the list the oldest `limit` imports whose record has expired; returns how many. */
    async forgetExpiredImports(limit = 100): Promise<number> {
      const oldest = await redis.zrange(keys.imports, 0, limit - 1);
      const gone: string[] = [];
      for (const id of oldest) if ((await redis.exists(keys.importRecord(id))) === 0) gone.push(id);
      await this.forgetImports(gone);
      return gone.length;
    },

    /**
     * Writes ledger entries for rows that have none yet (a re-run producer
     * changes nothing): HSETNX each, all in one script call, since a command
     * per row cost the producer more than twice the CPU.
     */
    async putPendingRows(importId: string, rows: ReadonlyArray<{ row: number; entry: LedgerEntry }>): Promise<void> {
      if (rows.length === 0) return;
      const args: string[] = [];
      for (const { row, entry } of rows) args.push(String(row), encodeEntry(entry));
      await putPendingRowsScript.run(redis, [keys.ledger(importId)], args);
    },

    /** Settles many rows in one script call (the producer's invalid rows). */
    async settleMany(importId: string, rows: ReadonlyArray<{ row: number; entry: LedgerEntry }>, now = Date.now()): Promise<void> {
      if (rows.length > 0) await settleRows(importId, rows, NO_FIGURES, now);
    },

    settle,
    settleRows,
    updateUnsettledRows,
    markSent,

    /** Watches the rollback counter of every mark and settle from now on (src/store/rollback.ts). */
    watchSeq(next: SeqWatch | undefined): void {
      watch = next;
    },

    /** Records the digests of an upsert's match values, for the worker that plans how to find its customers. */
    async addMatchDigests(importId: string, digests: readonly Buffer[]): Promise<void> {
      if (digests.length > 0) await redis.sadd(keys.matchDigests(importId), ...digests);
    },

    /** Deletes what finding an import's customers kept (match digests, plan, records and name searches read): the import has settled. */
    async forgetFinding(importId: string): Promise<void> {
      await redis.unlink(keys.matchDigests(importId), keys.findPlan(importId), keys.foundRecords(importId), keys.nameSearches(importId));
    },

    /** Rows with a ledger entry so far (all of them once the import is enqueued). */
    async rowCount(importId: string): Promise<number> {
      return redis.hlen(keys.ledger(importId));
    },

    async getRow(importId: string, row: number): Promise<LedgerEntry | undefined> {
      const text = await redis.hget(keys.ledger(importId), String(row));
      return text === null ? undefined : decodeEntry(text);
    },

    /** The entries of some rows in one read (a batch job's rows); undefined for a row with none. */
    async getRows(importId: string, rows: readonly number[]): Promise<Array<LedgerEntry | undefined>> {
      if (rows.length === 0) return [];
      const texts = await redis.hmget(keys.ledger(importId), ...rows.map(String));
      return texts.map((text) => (text === null ? undefined : decodeEntry(text)));
    },

    /** Writes one unsettled entry; false if the row settled meanwhile. */
    async updateUnsettled(importId: string, row: number, entry: LedgerEntry): Promise<boolean> {
      const [written] = await updateUnsettledRows(importId, [{ row, entry }]);
      return written === true;
    },

    /** Reopens a settled row for retry; returns the new round, or undefined when it was not settled. */
    async reopenRow(importId: string, row: number, entry: LedgerEntry): Promise<number | undefined> {
      const reply = await reopenScript.run(redis, [keys.ledger(importId), keys.counts(importId), keys.importRecord(importId), keys.matchDigests(importId), keys.findPlan(importId), keys.foundRecords(importId), keys.series(importId), keys.searchIndex(importId), keys.runState(importId)], [String(row), encodeEntry(entry)]);
      return typeof reply === 'number' && reply > 0 ? reply : undefined;
    },

    /** Records the row total; `complete` when every row had already settled (all invalid, or fast workers). */
    async markEnqueued(importId: string, total: number): Promise<{ settled: number; complete: boolean; round: number }> {
      const reply = await markEnqueuedScript.run(redis, [keys.importRecord(importId), keys.counts(importId)], [String(total)]);
      const [settled, round] = z.tuple([z.number(), z.number()]).parse(reply);
      return { settled, complete: settled === total, round };
    },

    /** Adds API figures of runs that settled nothing; their 429s go into the import's series in the same call. */
    async addFigures(importId: string, added: Partial<RunFigures>, now = Date.now()): Promise<void> {
      const figures = { ...NO_FIGURES, ...added };
      if (figures.apiCalls === 0 && figures.retries === 0 && figures.rateLimited === 0) return;
      const args = [now, figures.apiCalls, figures.retries, figures.rateLimited, figures.searches, figures.reads].map(String);
      await addFiguresScript.run(redis, [keys.counts(importId), keys.importRecord(importId), keys.series(importId)], args);
    },

    /** The import's series hash (src/store/series.ts seriesPoints reads it). */
    async seriesHash(importId: string): Promise<Record<string, string>> {
      return redis.hgetall(keys.series(importId));
    },

    /**
     * Adds rows to search terms of the import's index (digests of src/store/searchIndex.ts), in one call.
     * The digests go end to end in one binary argument, the script cuts them apart: a Buffer per term
     * (a flush has hundreds) cost the producer more than the script's work for them.
     */
    async addSearchTerms(importId: string, terms: ReadonlyMap<string, readonly number[]>): Promise<void> {
      if (terms.size === 0) return;
      let packed = '';
      const args: Array<string | Buffer> = [];
      for (const [digest, rows] of terms) {
        if (rows.length === 0) continue;
        packed += digest;
        args.push(rows.join(','));
      }
      if (args.length === 0) return;
      args.unshift(digestBytes(packed));
      await addSearchTermsScript.run(redis, [keys.searchIndex(importId)], args);
    },

    /** The stored rows of some term digests in each of some imports: one pipelined read. */
    async searchTermRows(importIds: readonly string[], digests: readonly string[]): Promise<Array<Array<string | null>>> {
      if (importIds.length === 0 || digests.length === 0) return importIds.map(() => []);
      const pipeline = redis.pipeline();
      const fields = digests.map(digestBytes);
      for (const id of importIds) pipeline.hmget(keys.searchIndex(id), ...fields);
      const replies = (await pipeline.exec()) ?? [];
      return replies.map(([error, value]) => {
        if (error) throw error;
        return Array.isArray(value) ? value.map((v) => (typeof v === 'string' ? v : null)) : digests.map(() => null);
      });
    },

    async counts(importId: string): Promise<ImportCounts> {
      return countsOf(await redis.hgetall(keys.counts(importId)));
    },

    /**
     * Every ledger entry in row order, read in chunks: memory stays flat
     * however long the file. The next chunk is read while this one is used.
     */
    async *rowsInOrder(importId: string, total: number, chunk = 1000): AsyncGenerator<{ row: number; entry: LedgerEntry }> {
      const read = (first: number) => {
        const rows = Array.from({ length: Math.min(chunk, total - first + 1) }, (_, i) => String(first + i));
        const texts = redis.hmget(keys.ledger(importId), ...rows);
        // Told when awaited; never an unhandled rejection if the caller stops early.
        texts.catch(() => undefined);
        return { rows, texts };
      };
      let next = total >= 1 ? read(1) : undefined;
      for (let first = 1; first <= total && next; first += chunk) {
        const { rows } = next;
        const texts = await next.texts;
        next = first + chunk <= total ? read(first + chunk) : undefined;
        for (let i = 0; i < rows.length; i++) {
          const text = texts[i];
          if (text === null || text === undefined) throw new Error(`import ${importId}: row ${first + i} has no ledger entry`);
          yield { row: first + i, entry: decodeEntry(text) };
        }
      }
    },

    /** Rows whose status is one of `statuses`, in order (for retry and the dashboard). */
    async *rowsWithStatus(importId: string, statuses: ReadonlySet<RowState>): AsyncGenerator<{ row: number; entry: LedgerEntry }> {
      const record = await this.getImport(importId);
      if (!record?.total) return;
      for await (const item of this.rowsInOrder(importId, record.total)) if (statuses.has(item.entry.status)) yield item;
    },

    /**
     * Marks the import's current round finished (its results are written) and
     * sets its record, ledger and counts to expire after `retentionSeconds`:
     * personal data is kept only so long. A retry reopens it, and removes the
     * expiry again.
     */
    async markFinished(importId: string, round: number, resultsDir: string, retentionSeconds: number, now = Date.now()): Promise<boolean> {
      const reply = await markFinishedScript.run(redis, importKeys(importId), [String(round), String(now), resultsDir, String(Math.max(1, Math.round(retentionSeconds)))]);
      return reply === 1;
    },

    /**
     * When an import's data expires (undefined: never, it is not finished)
     * and what its keys take in Redis (MEMORY USAGE, which samples large hashes).
     */
    async footprint(importId: string): Promise<{ expiresAt: number | undefined; bytes: number }> {
      const ttl = await redis.pttl(keys.importRecord(importId));
      let bytes = 0;
      for (const key of importKeys(importId)) {
        const usage = await redis.call('MEMORY', 'USAGE', key);
        if (typeof usage === 'number') bytes += usage;
      }
      return { expiresAt: ttl > 0 ? Date.now() + ttl : undefined, bytes };
    },
  };

  /** Every key of one import, its record first. */
  function importKeys(importId: string): string[] {
    return [keys.importRecord(importId), keys.ledger(importId), keys.counts(importId), keys.matchDigests(importId), keys.findPlan(importId), keys.foundRecords(importId), keys.series(importId), keys.searchIndex(importId), keys.runState(importId), keys.heldJobs(importId)];
  }
}

/**
 * The search terms a settled row adds (their digests end to end): the
 * CustomerID and PaymentMethodKey the service answered, which the file may
 * not hold (a created customer, a sign-up's card).
 */
function answeredTerms(entry: LedgerEntry): string | Buffer {
  if (entry.customerId === undefined && entry.paymentMethodKey === undefined) return '';
  let terms = '';
  for (const id of [entry.customerId, entry.paymentMethodKey]) {
    const term = id === undefined ? '' : idTerm(id);
    if (term !== '') terms += termDigest(term);
  }
  return terms === '' ? '' : digestBytes(terms);
}

/** A counts hash as a pipelined HGETALL answers it. */
const CountsHashSchema = z.record(z.string(), z.string());

/** Record fields a list of imports reads: what the history shows. */
const SUMMARY_FIELDS = ['id', 'file', 'kind', 'createdAt', 'state', 'total', 'round', 'lastSettledAt', 'finishedAt', 'resultsDir'] as const;

function countsOf(hash: Readonly<Record<string, string>>): ImportCounts {
  const n = (field: string): number => Number(hash[field] ?? 0);
  const byStatus = Object.fromEntries(ROW_STATUSES.map((s) => [s, n(s)])) as Record<RowStatus, number>;
  return { byStatus, settled: n('settled'), apiCalls: n('apiCalls'), retries: n('retries'), rateLimited: n('rateLimited'), searches: n('searches'), reads: n('reads') };
}

function numbers(reply: unknown, length: number): number[] {
  // Checked by hand, not by a schema: this runs for every few rows.
  if (Array.isArray(reply) && reply.length === length && reply.every((n) => typeof n === 'number')) return reply as number[];
  throw new Error(`unexpected reply from Redis script: ${JSON.stringify(reply)}`);
}

export type { ImportKind, JobName };
