/**
 * A fast check of a CSV file's bytes, made before any row is queued, so the
 * producer can parse the file once instead of twice (a malformed record
 * anywhere rejects the whole file before anything is enqueued).
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
 * - bytes that are not UTF-8 (the reader refuses them);
 * - two-byte UTF-8 that may be Windows-1252 read by chance (the reader
 *   refuses a file whose text shows it, see src/csv/sniff.ts): C1 controls,
 *   IPA letters, and Greek to NKo letters next to an ASCII letter;
 * - any other delimiter than a comma (a semicolon file doubts at its first
 *   quote, since the walk knows commas only).
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
  /**
   * Numbers of 16 to 19 digits in the file (card-number-like), and how many
   * of them end in zeros past their 15th significant digit, as a spreadsheet
   * that stored them as numbers writes them. See {@link showsRounding}.
   */
  longNumbers: { total: number; rounded: number };
}

/** A run of 16 to 19 digits standing alone (not part of a longer number, a decimal or a word). */
const LONG_NUMBER = /(?<![\w.])\d{16,19}(?![\w.])/g;
/** Zeros past the 15th significant digit. */
const ROUNDED = /^0*[1-9]\d{14}0+$/;

/**
 * Whether a file's long numbers show a spreadsheet's hand: at least 3 of them
 * and at least half end in zeros past the 15th digit (a real card number
 * ends in 0 one time in ten; a rounded one always does). Then a card number
 * ending so is refused even when its Luhn check passes (by chance, one time
 * in ten): the spreadsheet changed it.
 */
export function showsRounding(longNumbers: ByteScan['longNumbers']): boolean {
  return longNumbers.rounded >= 3 && longNumbers.rounded * 2 >= longNumbers.total;
}

const QUOTE = 0x22;
const COMMA = 0x2c;
const LF = 0x0a;
const CR = 0x0d;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * The lead bytes of two-byte sequences {@link mayBeMisread} may flag (1),
 * asked of it with every second byte and ASCII letters either side; for
 * the others (é, ñ, å, ń and most Latin letters) it never does.
 */
const MAY_BE_MISREAD = new Uint8Array(256);
for (let lead = 0xc2; lead <= 0xdf; lead++) {
  for (let next = 0x80; next <= 0xbf; next++) if (mayBeMisread(0x41, lead, next, 0x41)) MAY_BE_MISREAD[lead] = 1;
}

/**
 * Bytes that end a run the walk skips (1), by where it stands: inside
 * quotes only a quote matters; elsewhere a quote, a comma and a line break.
 * A lead byte {@link MAY_BE_MISREAD} flags ends it too: the walk checks
 * those one by one.
 */
const STOPS_QUOTED = stopTable([QUOTE]);
const STOPS_UNQUOTED = stopTable([QUOTE, COMMA, LF, CR]);
function stopTable(stops: number[]): Uint8Array {
  const table = Uint8Array.from(MAY_BE_MISREAD);
  for (const byte of stops) table[byte] = 1;
  return table;
}

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
  let wellFormed = true;
  let bytes = 0;
  // The bytes of a UTF-8 sequence cut by the end of the previous chunk.
  let carry: Buffer | undefined;
  const walk: WalkState = { at: At.FieldStart, recordBytes: 0, p1: 0, p2: 0, p3: 0 };
  const longNumbers = { total: 0, rounded: 0 };

  for await (const read of createReadStream(file, { highWaterMark: CHUNK_BYTES })) {
    const chunk = read as Buffer;
    onChunk?.(chunk);
    let start = 0;
    if (bytes === 0 && chunk.subarray(0, BOM.length).equals(BOM)) start = BOM.length;
    bytes += chunk.length;
    // Digits are ASCII: latin1 is the cheapest text to look for them in (a run cut by the chunk's end is missed).
    for (const [run] of chunk.toString('latin1').matchAll(LONG_NUMBER)) {
      longNumbers.total++;
      if (ROUNDED.test(run)) longNumbers.rounded++;
    }
    if (!wellFormed) continue; // still read to the end: the hash needs every byte

    // Encoding: complete sequences only; a cut one waits for the next chunk.
    const cut = incompleteTail(chunk);
    const whole = carry === undefined ? chunk.subarray(0, chunk.length - cut) : Buffer.concat([carry, chunk.subarray(0, chunk.length - cut)]);
    carry = cut > 0 ? Buffer.from(chunk.subarray(chunk.length - cut)) : undefined;
    if (!isUtf8(whole)) {
      wellFormed = false;
      continue;
    }

    // Quoting and record size.
    if (!walkChunk(chunk, start, walk)) wellFormed = false;
  }
  if (walk.at === At.Quoted || carry !== undefined) wellFormed = false;
  if (walk.p2 >= 0xc2 && walk.p2 <= 0xdf && mayBeMisread(walk.p3, walk.p2, walk.p1, undefined)) wellFormed = false;
  return { wellFormed, bytes, longNumbers };
}

/**
 * Where the walk stands between chunks: its state, the bytes of the
 * current record so far, and the three bytes before the next one (p1 the
 * nearest): a two-byte sequence is judged once the byte after it is known.
 */
interface WalkState {
  at: At;
  recordBytes: number;
  p1: number;
  p2: number;
  p3: number;
}

/** Walks the quoting of one chunk from `start`, `state` carried from the chunk before; false at the first doubt. */
function walkChunk(chunk: Buffer, start: number, state: WalkState): boolean {
  let { at, recordBytes, p1, p2, p3 } = state;
  let wellFormed = true;
  for (let i = start; i < chunk.length; i++) {
    // A run of bytes that change nothing but the record's size (text) is skipped in one tight loop:
    // most of a file. Not right after a quote inside quotes (the next byte decides), and only when no
    // two-byte sequence that may be misread waits for its check: the check of the bytes at i and
    // i + 1 looks back at p2 and p1.
    if (at !== At.QuoteInQuoted && MAY_BE_MISREAD[p1] === 0 && MAY_BE_MISREAD[p2] === 0) {
      const stops = at === At.Quoted ? STOPS_QUOTED : STOPS_UNQUOTED;
      let end = i;
      while (end < chunk.length && stops[chunk[end] ?? 0] === 0) end++;
      const run = end - i;
      if (run > 0) {
        recordBytes += run;
        if (at !== At.Quoted) at = At.Unquoted;
        p3 = run >= 3 ? (chunk[end - 3] ?? 0) : run === 2 ? p1 : p2;
        p2 = run >= 2 ? (chunk[end - 2] ?? 0) : p1;
        p1 = chunk[end - 1] ?? 0;
        if (recordBytes > MAX_RECORD_CHARS) {
          wellFormed = false;
          break;
        }
        i = end;
        if (i === chunk.length) break;
      }
    }
    const byte = chunk[i] ?? 0;
    recordBytes++;
    if (p2 >= 0xc2 && p2 <= 0xdf && mayBeMisread(p3, p2, p1, byte)) wellFormed = false;
    p3 = p2;
    p2 = p1;
    p1 = byte;
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
  Object.assign(state, { at, recordBytes, p1, p2, p3 });
  return wellFormed;
}

// A declaration, not a const: MAY_BE_MISREAD calls it as the module loads.
function isAsciiLetter(byte: number | undefined): boolean {
  return byte !== undefined && ((byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a));
}

/**
 * Whether the two-byte sequence `lead next` may decode to a character the
 * reader takes for Windows-1252 read as UTF-8 (a superset of its test).
 */
function mayBeMisread(before: number, lead: number, next: number, after: number | undefined): boolean {
  if (lead === 0xc2) return next <= 0x9f;
  if (lead === 0xc9) return next >= 0x90;
  if (lead === 0xca) return next <= 0xaf;
  return lead >= 0xcd && (isAsciiLetter(before) || isAsciiLetter(after));
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
