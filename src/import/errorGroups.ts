/**
 * An import's problem rows (invalid, failed, needs-review) grouped by cause,
 * so that an operator facing thousands of them sees a few causes, each with a
 * stable code that `retry --group` takes.
 *
 * - An invalid row's cause is the column and rule of the first rule it
 *   breaks: code `invalid:COLUMN:RULE` (`invalid:RULE` when the rule is about
 *   the whole row: column-count, repeated-header).
 * - A failed or needs-review row's cause is the service's words (or subsync's)
 *   with what differs from row to row generalised: GUIDs, email addresses,
 *   quoted values and digit runs. The words stay: two messages are one cause
 *   only when their generalised text is the same. Code: the status and the
 *   first 8 hex digits of the SHA-256 of the generalised text.
 *
 * One pass over the ledger in chunks; per group only its figures and its row
 * numbers, kept as 32-bit integers, so 100,000 failed rows take well under a
 * megabyte however long their messages.
 */
import { createHash } from 'node:crypto';
import { PROBLEM_STATUSES, type RowStatus } from '../outcomes.js';
import type { ImportStore, LedgerEntry } from '../store/importStore.js';
import { ImportNotFoundError } from './status.js';

export type ProblemStatus = 'invalid' | 'failed' | 'needs-review';

export interface ErrorGroup {
  /** Stable for the same cause across imports and runs: what `retry --group` takes. */
  code: string;
  /** The cause, for a person: the generalised message. */
  reason: string;
  status: ProblemStatus;
  count: number;
  /** The earliest and latest last attempt (ISO) of the group's rows; null when none was attempted (invalid rows never are). */
  firstSeen: string | null;
  lastSeen: string | null;
  /** Row numbers, ascending. */
  rows: number[];
}

export interface ErrorGroups {
  importId: string;
  /** By count, the largest first; then by code. */
  groups: ErrorGroup[];
}

/** A row's cause: its group's code and reason. */
export interface Cause {
  code: string;
  reason: string;
}

const GUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const EMAIL = /[^\s"'<>(),;:]+@[^\s"'<>(),;:]+\.[a-z]{2,}/gi;
// A double-quoted value as JSON writes it (escapes included), or a single-quoted one that is not an apostrophe.
const DOUBLE_QUOTED = /"(?:[^"\\]|\\.)*"/g;
const SINGLE_QUOTED = /(^|[^\p{L}\p{N}])'[^'\n]*'(?![\p{L}\p{N}])/gu;
const DIGITS = /\d+/g;

/**
 * The text with what differs from row to row replaced, the words kept:
 * GUIDs by `<guid>`, email addresses by `<email>`, quoted values by `"…"`,
 * digit runs by `<n>`. GUIDs and emails go first: they hold digit runs.
 */
export function generalise(text: string): string {
  return text
    .replace(GUID, '<guid>')
    .replace(EMAIL, '<email>')
    .replace(DOUBLE_QUOTED, '"…"')
    .replace(SINGLE_QUOTED, (_match, before: string) => `${before}'…'`)
    .replace(DIGITS, '<n>')
    .replace(/\s+/g, ' ')
    .trim();
}

/** The short stable hash of a generalised text: 8 hex digits of its SHA-256. */
export function shortHash(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex').slice(0, 8);
}

const RULE = /\(rule: ([a-z0-9-]+)\)/;
// The row's place, as src/csv/rows.ts writes it: `row 7` or `row 7 (spreadsheet row 8, line 8)`.
const WHERE = /^row \d+(?: \(spreadsheet row \d+, line \d+\))?/;
const NAMED_COLUMN = /^, column "((?:[^"\\]|\\.)*)": /;
const NUMBERED_COLUMN = /^, column (\d+): /;

/**
 * An invalid row's cause from its message (its first, when it breaks several
 * rules): the column and rule; the reason is the message without the row's
 * place and with the value shown dropped (`"bob@" is not an email address`
 * reads `not an email address`).
 */
function invalidCause(message: string): Cause | undefined {
  const rule = RULE.exec(message);
  if (!rule) return undefined;
  const first = message.slice(0, rule.index + rule[0].length);
  const place = WHERE.exec(first);
  if (!place) return undefined;
  const rest = first.slice(place[0].length);
  let column = '';
  let text: string;
  const named = NAMED_COLUMN.exec(rest);
  const numbered = named ? null : NUMBERED_COLUMN.exec(rest);
  if (named) {
    column = unescape(named[1] ?? '');
    text = rest.slice(named[0].length);
  } else if (numbered) {
    column = `column ${numbered[1] ?? ''}`;
    text = rest.slice(numbered[0].length);
  } else text = rest.replace(/^: /, '');
  text = text
    .slice(0, text.length - rule[0].length)
    .trim()
    // The value shown first is the row's own; what is wrong with it is the rest.
    .replace(/^"(?:[^"\\]|\\.)*"\s+(?:is\s+)?/, '')
    .replace(DOUBLE_QUOTED, '"…"')
    .replace(/;$/, '');
  const ruleName = rule[1] ?? '';
  return {
    code: column === '' ? `invalid:${ruleName}` : `invalid:${column}:${ruleName}`,
    reason: `${column === '' ? '' : `${column}: `}${text} (rule: ${ruleName})`,
  };
}

function unescape(jsonBody: string): string {
  try {
    const value: unknown = JSON.parse(`"${jsonBody}"`);
    return typeof value === 'string' ? value : jsonBody;
  } catch {
    return jsonBody;
  }
}

export const isProblemStatus = (status: string): status is ProblemStatus => PROBLEM_STATUSES.has(status as RowStatus);

/** The cause of a problem row; undefined for any other. */
export function causeOf(entry: Pick<LedgerEntry, 'status' | 'note'>): Cause | undefined {
  if (!isProblemStatus(entry.status)) return undefined;
  const text = entry.note ?? '';
  if (entry.status === 'invalid') {
    const cause = invalidCause(text);
    if (cause) return cause;
  }
  const reason = generalise(text) || '(no reason recorded)';
  return { code: `${entry.status}:${shortHash(reason)}`, reason };
}

/** Row numbers as 32-bit integers, grown by doubling: a tenth of what an array of numbers takes. */
class RowList {
  private items = new Uint32Array(16);
  length = 0;

  push(row: number): void {
    if (this.length === this.items.length) {
      const grown = new Uint32Array(this.items.length * 2);
      grown.set(this.items);
      this.items = grown;
    }
    this.items[this.length++] = row;
  }

  toArray(): number[] {
    return Array.from(this.items.subarray(0, this.length));
  }
}

interface Tally {
  cause: Cause;
  status: ProblemStatus;
  rows: RowList;
  first: number | undefined;
  last: number | undefined;
}

const iso = (ms: number | undefined): string | null => (ms === undefined ? null : new Date(ms).toISOString());

/** The import's problem rows grouped by cause, in one pass over its ledger. */
export async function errorGroups(store: ImportStore, importId: string): Promise<ErrorGroups> {
  if (!(await store.getImport(importId))) throw new ImportNotFoundError(importId);
  const tallies = new Map<string, Tally>();
  for await (const { row, entry } of store.rowsWithStatus(importId, PROBLEM_STATUSES)) {
    const cause = causeOf(entry);
    if (!cause || !isProblemStatus(entry.status)) continue;
    let tally = tallies.get(cause.code);
    if (!tally) {
      tally = { cause, status: entry.status, rows: new RowList(), first: undefined, last: undefined };
      tallies.set(cause.code, tally);
    }
    tally.rows.push(row);
    if (entry.lastAttemptAt !== undefined) {
      if (tally.first === undefined || entry.lastAttemptAt < tally.first) tally.first = entry.lastAttemptAt;
      if (tally.last === undefined || entry.lastAttemptAt > tally.last) tally.last = entry.lastAttemptAt;
    }
  }
  const groups = [...tallies.values()].map((t): ErrorGroup => ({
    code: t.cause.code,
    reason: t.cause.reason,
    status: t.status,
    count: t.rows.length,
    firstSeen: iso(t.first),
    lastSeen: iso(t.last),
    rows: t.rows.toArray(),
  }));
  groups.sort((a, b) => b.count - a.count || (a.code < b.code ? -1 : a.code > b.code ? 1 : 0));
  return { importId, groups };
}

/** The rows of one group with their entries, in row order (for `retry --group`); one pass as well. */
export async function* rowsOfGroup(store: ImportStore, importId: string, code: string): AsyncGenerator<{ row: number; entry: LedgerEntry }> {
  for await (const item of store.rowsWithStatus(importId, PROBLEM_STATUSES)) {
    if (causeOf(item.entry)?.code === code) yield item;
  }
}
