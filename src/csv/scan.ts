/**
 * A fast check of a CSV file's bytes, made before any row is queued, so the
 * producer can parse the file once instead of twice (DESIGN section 2: a
 * malformed record anywhere rejects the whole file before anything is
 * enqueued).
 *
 * It walks the RFC 4180 quoting at byte level, with none of csv-parse's
 * per-record work, and answers one question: could csv-parse, with the
 * reader's options (src/csv/reader.ts), fail anywhere in this file? It is
 * conservative by construction: "no" (`wellFormed: true`) only when every
 * byte sequence that makes csv-parse or the reader fail is absent:
 * - a quote inside an unquoted field (csv-parse: invalid opening quote);
 * - anything but a comma, a line break or the end after a closing quote
 *   (invalid closing quote);
 * - the file ending inside quotes (quote not closed);
 * - a record longer than {@link MAX_RECORD_CHARS} bytes (csv-parse counts
 *   characters of cell text, never more than their bytes);
 * - bytes that are not UTF-8, or U+FFFD itself (the reader refuses both).
 * Anything else it reports as a doubt (`wellFormed: false`), and then the
 * full csv-parse read decides, with its exact message and line. A doubt is
 * never an error by itself: it only costs the second read the producer used
 * to make for every file.
 */
import { createReadStream } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { MAX_RECORD_CHARS } from './reader.js';

export interface ByteScan {
  /** True when csv-parse surely reads every record; false when in doubt (then parse the file to know). */
  wellFormed: boolean;
  /** Bytes read. */
  bytes: number;
}

const QUOTE = 0x22;
const COMMA = 0x2c;
const LF = 0x0a;
const CR = 0x0d;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
const REPLACEMENT_CHARACTER = Buffer.from('\uFFFD', 'utf8');

/** Where the walk stands: at the start of a field, inside an unquoted one, inside quotes, just after a quote inside quotes. */
const At = { FieldStart: 0, Unquoted: 1, Quoted: 2, QuoteInQuoted: 3 } as const;
type At = (typeof At)[keyof typeof At];

/** Read size: large reads keep the walk in one tight loop (memory stays one chunk). */
const CHUNK_BYTES = 256 * 1024;

/**
 * Reads `file` once, handing every chunk to `onChunk` (the producer hashes
 * them into the import id), and tells whether csv-parse surely reads it all.
 */
export async function scanCsvBytes(file: string, onChunk?: (chunk: Buffer) => void): Promise<ByteScan> {
  let at: At = At.FieldStart;
  let recordBytes = 0;
  let wellFormed = true;
  let bytes = 0;
  // The bytes of a UTF-8 sequence cut by the end of the previous chunk.
  let carry: Buffer | undefined;

  for await (const read of createReadStream(file, { highWaterMark: CHUNK_BYTES })) {
    const chunk = read as Buffer;
    onChunk?.(chunk);
    let start = 0;
    if (bytes === 0 && chunk.subarray(0, BOM.length).equals(BOM)) start = BOM.length;
    bytes += chunk.length;
    if (!wellFormed) continue; // still read to the end: the hash needs every byte

    // Encoding: complete sequences only; a cut one waits for the next chunk.
    const cut = incompleteTail(chunk);
    const whole = carry === undefined ? chunk.subarray(0, chunk.length - cut) : Buffer.concat([carry, chunk.subarray(0, chunk.length - cut)]);
    carry = cut > 0 ? Buffer.from(chunk.subarray(chunk.length - cut)) : undefined;
    if (!isUtf8(whole) || whole.includes(REPLACEMENT_CHARACTER)) {
      wellFormed = false;
      continue;
    }

    // Quoting and record size.
    for (let i = start; i < chunk.length; i++) {
      const byte = chunk[i];
      recordBytes++;
      switch (at) {
        case At.FieldStart:
        case At.Unquoted:
          if (byte === COMMA) at = At.FieldStart;
          else if (byte === LF || byte === CR) {
            at = At.FieldStart;
            recordBytes = 0;
          } else if (byte === QUOTE) {
            if (at === At.Unquoted) wellFormed = false;
            else at = At.Quoted;
          } else at = At.Unquoted;
          break;
        case At.Quoted:
          if (byte === QUOTE) at = At.QuoteInQuoted;
          break;
        case At.QuoteInQuoted:
          // `""` is a quote inside the cell; after a closing quote only a comma or a line break may follow.
          if (byte === QUOTE) at = At.Quoted;
          else if (byte === COMMA) at = At.FieldStart;
          else if (byte === LF || byte === CR) {
            at = At.FieldStart;
            recordBytes = 0;
          } else wellFormed = false;
          break;
      }
      if (recordBytes > MAX_RECORD_CHARS) wellFormed = false;
      if (!wellFormed) break;
    }
  }
  if (at === At.Quoted || carry !== undefined) wellFormed = false;
  return { wellFormed, bytes };
}

/** How many bytes at the end of `chunk` start a UTF-8 sequence that the chunk does not complete. */
function incompleteTail(chunk: Buffer): number {
  for (let back = 1; back <= Math.min(3, chunk.length); back++) {
    const byte = chunk[chunk.length - back] ?? 0;
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: the lead is further back
    if (byte < 0xc0) return 0; // ASCII: nothing cut
    const length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : 2;
    return back < length ? back : 0;
  }
  return 0;
}
