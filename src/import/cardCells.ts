import { stat } from 'node:fs/promises';
import type { Logger } from 'pino';
import { sealSecrets, type CardKeyring } from '../cards/crypto.js';
import { openCsv } from '../csv/reader.js';
import { sealedColumnIndexes } from '../csv/rows.js';
import type { ImportJournal, JournalSource } from '../store/continuity.js';
import type { ImportRecord } from '../store/importStore.js';
import { planOf } from '../store/plan.js';
import { scanFile } from './producer.js';

/**
 * A card row's sealed cells read again from its import's file, for a row
 * whose job, and with it the only copy of its card data, Redis lost (a
 * rollback: src/store/rollback.ts). The journal of the data dir says where
 * the file was and the digest of its bytes (src/store/continuity.ts); the
 * cells are read only from a file still at that path with that digest, and
 * sealed again at once: the card number and CVC exist in the clear only in
 * this process's memory, as when the producer read them. A file gone or
 * changed gives nothing, and the row ends as before (read back, or failed
 * saying the card data was lost).
 */
export interface CardCells {
  /** The row's card cells sealed again from its file; undefined when the file is gone, changed, or the row is not in it. */
  reseal(record: ImportRecord, row: number): Promise<string | undefined>;
}

/** Rows asked for within this long share one read of their file (a batch's rows ask together, a sweep's jobs nearly so). */
const GATHER_MS = 200;
/** Verified files remembered, by path, size, modification time and inode: a file is hashed again only when it changed. */
const VERIFIED_KEPT = 32;

export function createCardCells(deps: { journal: ImportJournal; keyring: CardKeyring | undefined; logger: Logger }): CardCells {
  const { journal, keyring, logger } = deps;
  const gathering = new Map<string, { record: ImportRecord; rows: Map<number, Array<(token: string | undefined) => void>> }>();
  const verified = new Map<string, boolean>();

  /** Whether the file at `source.path` still holds the bytes imported (a digest kept per version of the file seen). */
  async function sameBytes(source: JournalSource, kind: ImportRecord['kind'], version: string): Promise<boolean> {
    let same = verified.get(version);
    if (same === undefined) {
      same = (await scanFile(source.path, kind)).digest === source.digest;
      if (verified.size >= VERIFIED_KEPT) verified.delete(verified.keys().next().value as string);
      verified.set(version, same);
    }
    return same;
  }

  /** One read of the import's file for the rows asked: their sealed cells, or an empty map and why. */
  async function reread(record: ImportRecord, rows: ReadonlySet<number>): Promise<{ tokens: Map<number, string>; why?: string }> {
    const tokens = new Map<number, string>();
    if (!keyring) return { tokens, why: 'this process has no card key' };
    const source = (await journal.read(record.id))?.source;
    if (!source) return { tokens, why: 'the data dir does not know where the file was' };
    const versionOf = async (): Promise<string | undefined> => {
      const s = await stat(source.path).catch(() => undefined);
      return s?.isFile() ? `${source.path}|${s.size}|${s.mtimeMs}|${s.ino}` : undefined;
    };
    const version = await versionOf();
    if (version === undefined) return { tokens, why: 'the file is no longer at its path' };
    if (!(await sameBytes(source, record.kind, version))) return { tokens, why: 'the file at its path has changed since it was imported' };
    const plan = planOf(record);
    const columns = sealedColumnIndexes(plan);
    const csv = await openCsv(source.path, { encoding: source.encoding, map: source.map });
    try {
      if (csv.headers.length !== record.headers.length || csv.headers.some((h, i) => h !== record.headers[i])) return { tokens, why: 'the file reads with other headers' };
      for await (const { row, cells } of csv.rows) {
        if (!rows.has(row)) continue;
        tokens.set(row, sealSecrets(keyring, Object.fromEntries(columns.map((index) => [String(index), cells[index] ?? '']))));
        if (tokens.size === rows.size) break;
      }
    } finally {
      csv.close();
    }
    // Changed while it was read: what was read may not be what was imported.
    if ((await versionOf()) !== version) return { tokens: new Map(), why: 'the file changed while it was read' };
    return { tokens };
  }

  async function pass(importId: string): Promise<void> {
    const gathered = gathering.get(importId);
    gathering.delete(importId);
    if (!gathered) return;
    const { record, rows } = gathered;
    let tokens = new Map<number, string>();
    try {
      const read = await reread(record, new Set(rows.keys()));
      tokens = read.tokens;
      if (read.why) logger.warn({ importId, rows: rows.size, reason: read.why }, 'card rows whose card data Redis lost: not read again from the file');
      else logger.warn({ importId, rows: rows.size, found: tokens.size }, 'card rows whose card data Redis lost: read again from the file and sealed');
    } catch (error) {
      // Only the error's kind: a parser's words may quote a cell.
      const reason = error instanceof Error ? ((error as NodeJS.ErrnoException).code ?? error.name) : 'unknown';
      logger.warn({ importId, rows: rows.size, reason }, 'card rows whose card data Redis lost: reading the file again failed');
    }
    for (const [row, waiting] of rows) for (const resolve of waiting) resolve(tokens.get(row));
  }

  return {
    reseal(record, row) {
      return new Promise((resolve) => {
        let gathered = gathering.get(record.id);
        if (!gathered) {
          gathered = { record, rows: new Map() };
          gathering.set(record.id, gathered);
          setTimeout(() => void pass(record.id), GATHER_MS);
        }
        const waiting = gathered.rows.get(row);
        if (waiting) waiting.push(resolve);
        else gathered.rows.set(row, [resolve]);
      });
    },
  };
}
