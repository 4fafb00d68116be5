/**
 * Search: the rows of every import Redis still holds (within retention) by
 * email, name (first, last, or both), CustomerID or PaymentMethodKey. What
 * `subsync find` prints and the dashboard's search box shows.
 *
 * Each import has a search index (src/store/searchIndex.ts) written as its
 * rows are enqueued and as they settle, so a search reads one hash field per
 * import (pipelined, a few hundred imports a round trip) and then only the
 * ledger entries of the rows it names, whatever the imports' sizes. Each hit
 * is checked against the row as it is now, so a digest that collides, or a
 * row edited since, is never shown for what it does not hold.
 *
 * Card data is never searched: card columns are not indexed, and a search
 * text shaped like a card number (src/secrets.ts) is not looked up at all;
 * it is only ever shown masked.
 */
import { scrubSecrets } from '../secrets.js';
import { planOf } from '../store/plan.js';
import type { ImportStore, LedgerEntry, RowState } from '../store/importStore.js';
import { parseTermRows, termDigest } from '../store/searchIndex.js';
import { nameSplits, queryTerms, searchableCells, termsOf, type MatchedField } from './searchTerms.js';

/** One row found. */
export interface FindHit {
  importId: string;
  file: string;
  kind: string;
  row: number;
  /** The row's state: its outcome, or `pending`/`sent` while it runs. */
  status: RowState;
  /** What of the row the text matched. */
  matched: MatchedField;
  email: string;
  firstName: string;
  lastName: string;
  /** From the file, else as the service answered it once the row settled; '' when none. */
  customerId: string;
  paymentMethodKey: string;
}

export interface FindResult {
  /** The search text as it may be shown: card-number-shaped runs masked. */
  shown: string;
  hits: FindHit[];
  /** Imports looked in. */
  imports: number;
  /** A card-number-shaped text: not searched. */
  refused: boolean;
  /** More rows match than were returned (the limit, or a term on too many rows of one import). */
  more: boolean;
}

export interface FindOptions {
  /** Rows to return at most (default 50). */
  limit?: number;
}

/** Imports whose index fields are read per round trip. */
const IMPORTS_PER_READ = 500;
const GUID = /^\{?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\}?$/i;

/** A text that looks like a card number (and not a GUID, whose digit runs may be long): masked, never searched. */
export function isCardShaped(text: string): boolean {
  return !GUID.test(text.trim()) && scrubSecrets(text) !== text;
}

/** The text as `find` shows it back: masked where it looks like a card number. */
export const shownQuery = (text: string): string => (isCardShaped(text) ? scrubSecrets(text) : text);

/** Rows of any import matching `text`, newest import first, rows in order. */
export async function findRows(store: ImportStore, text: string, options: FindOptions = {}): Promise<FindResult> {
  const limit = Math.max(1, options.limit ?? 50);
  const shown = shownQuery(text);
  const refused = isCardShaped(text);
  const terms = refused ? [] : queryTerms(text);
  if (terms.length === 0) return { shown, hits: [], imports: 0, refused, more: false };
  const splits = nameSplits(text);
  // A row matches a whole term, or (its full name) both halves of a split.
  const wanted = new Set([...terms, ...splits.map(([first, last]) => `${first} ${last}`)]);
  const looked = [...new Set([...terms, ...splits.flat()])];
  const digests = looked.map(termDigest);
  const slot = new Map(looked.map((term, i) => [term, i]));
  const hits: FindHit[] = [];
  let more = false;
  let imports = 0;
  for (let offset = 0; ; offset += IMPORTS_PER_READ) {
    const { ids, indexed } = await store.importIdsPage(offset, IMPORTS_PER_READ);
    imports += ids.length;
    const fields = await store.searchTermRows(ids, digests);
    for (let i = 0; i < ids.length; i++) {
      const found = fields[i]?.map(parseTermRows) ?? [];
      const of = (term: string): { rows: number[]; truncated: boolean } => found[slot.get(term) ?? -1] ?? { rows: [], truncated: false };
      const candidates = new Set(terms.flatMap((t) => of(t).rows));
      if (terms.some((t) => of(t).truncated)) more = true;
      for (const [first, last] of splits) {
        const [a, b] = [of(first), of(last)];
        // Both lists cut short: rows holding both may be in neither.
        if (a.truncated && b.truncated) more = true;
        const other = new Set(b.rows);
        for (const row of a.rows) if (other.has(row) || b.truncated) candidates.add(row);
        if (a.truncated) for (const row of b.rows) candidates.add(row);
      }
      const rows = [...candidates].sort((x, y) => x - y);
      if (rows.length === 0) continue;
      if (hits.length >= limit) {
        more = true;
        break;
      }
      const importHits = await checkedHits(store, ids[i] ?? '', rows, wanted, limit - hits.length + 1);
      if (importHits.length > limit - hits.length) more = true;
      hits.push(...importHits.slice(0, limit - hits.length));
    }
    if (more && hits.length >= limit) break;
    if (ids.length < IMPORTS_PER_READ || offset + ids.length >= indexed) break;
  }
  return { shown, hits, imports, refused, more };
}

/** The rows of one import that hold a wanted term now, at most `max`. */
async function checkedHits(store: ImportStore, importId: string, rows: readonly number[], wanted: ReadonlySet<string>, max: number): Promise<FindHit[]> {
  const record = await store.getImport(importId);
  if (!record) return [];
  const plan = planOf(record);
  const hits: FindHit[] = [];
  // Read in slices: most candidates match, so a slice rarely reads far beyond what is kept.
  for (let start = 0; start < rows.length && hits.length < max; start += max) {
    const slice = rows.slice(start, start + max);
    const entries = await store.getRows(importId, slice);
    slice.forEach((row, i) => {
      const entry = entries[i];
      if (!entry || hits.length >= max) return;
      const hit = hitOf(importId, record.file, record.kind, row, entry, plan, wanted);
      if (hit) hits.push(hit);
    });
  }
  return hits;
}

function hitOf(importId: string, file: string, kind: string, row: number, entry: LedgerEntry, plan: ReturnType<typeof planOf>, wanted: ReadonlySet<string>): FindHit | undefined {
  const values = searchableCells(plan, entry.cells);
  if (values.customerId === '' && entry.customerId !== undefined) values.customerId = entry.customerId;
  if (values.paymentMethodKey === '' && entry.paymentMethodKey !== undefined) values.paymentMethodKey = entry.paymentMethodKey;
  const match = termsOf(values).find(({ term }) => wanted.has(term));
  if (!match) return undefined;
  return {
    importId,
    file,
    kind,
    row,
    status: entry.status,
    matched: match.field,
    email: values.email,
    firstName: values.firstName,
    lastName: values.lastName,
    customerId: values.customerId,
    paymentMethodKey: values.paymentMethodKey,
  };
}
