/**
 * What the start of a file tells before csv-parse reads it: its encoding, its
 * delimiter, and on which line its header is. Pure functions over the first
 * bytes (or their text), so each decision is tested without a file.
 *
 * Decisions:
 * - Encoding: a BOM decides (UTF-8, UTF-16LE, UTF-16BE). Without one, text
 *   with a NUL in every other byte is UTF-16 without a BOM, and bytes that are
 *   not UTF-8 are a legacy single-byte encoding; both are refused naming the
 *   likely encoding and the fix, since guessing would store wrong letters.
 *   `--encoding NAME` reads a file on purpose in any encoding TextDecoder knows.
 * - Delimiter: a comma, unless the header line shows another beyond doubt:
 *   split by `;` or a tab it has two or more cells, every one a column subsync
 *   knows (or a mapped one). A `sep=X` first line (Excel writes and honours
 *   it) names the delimiter outright.
 * - Header line: the first non-blank line. Lines above a header that follows
 *   beyond doubt are skipped when each is a single cell (a title, a table name,
 *   PowerShell 5.1's `#TYPE …`); anything else above it is refused, saying on
 *   which line the header is.
 */

import { scrubCardNumbers } from '../api/rules.js';

/** The encodings a file is read in when none is named: what a BOM says, else UTF-8. */
export interface EncodingChoice {
  /** A TextDecoder label. */
  encoding: string;
  /** Bytes of BOM at the start of the file (skipped). */
  bomBytes: number;
  /** True when the operator named it (`--encoding`) or a BOM did: the UTF-8 misreading check is then off. */
  declared: boolean;
}

export interface EncodingProblem {
  /** 1-based line of the first byte that gave the encoding away. */
  line: number;
  problem: string;
}

const UTF8_BOM = [0xef, 0xbb, 0xbf];

/** How to save a file correctly, said once for every encoding refusal. */
export const SAVE_AS_UTF8 =
  'save it as UTF-8 (Excel: Save As > "CSV UTF-8 (Comma delimited)"; LibreOffice: Save As > Text CSV, Character set "Unicode (UTF-8)"; Numbers: Export To > CSV, Text Encoding "Unicode (UTF-8)") and drop it in again';

/** Decides the encoding from the first bytes of the file (`head`), or says why the file is refused. */
export function chooseEncoding(head: Buffer, explicit?: string): EncodingChoice | EncodingProblem {
  if (explicit !== undefined) {
    const encoding = decoderLabel(explicit);
    if (encoding === undefined) {
      return { line: 1, problem: `--encoding ${JSON.stringify(explicit)} is not an encoding this program knows (e.g. utf-8, windows-1252, macintosh, utf-16le)` };
    }
    return { encoding, bomBytes: bomLength(head, encoding), declared: true };
  }
  if (startsWith(head, UTF8_BOM)) return { encoding: 'utf-8', bomBytes: 3, declared: true };
  if (startsWith(head, [0xff, 0xfe])) return { encoding: 'utf-16le', bomBytes: 2, declared: true };
  if (startsWith(head, [0xfe, 0xff])) return { encoding: 'utf-16be', bomBytes: 2, declared: true };
  const utf16 = utf16WithoutBom(head);
  if (utf16 !== undefined) {
    return {
      line: 1,
      problem: `the file is UTF-16 (${utf16 === 'utf-16le' ? 'little' : 'big'}-endian) without a byte order mark, so its encoding cannot be told for sure: read it with --encoding ${utf16}, or ${SAVE_AS_UTF8}`,
    };
  }
  const bad = firstInvalidUtf8(head, true);
  if (bad !== undefined) return legacyProblem(head, bad);
  return { encoding: 'utf-8', bomBytes: 0, declared: false };
}

/** The refusal of a file that is not UTF-8, its first offending byte at `offset` of `bytes` (which start at line `firstLine`). */
export function legacyProblem(bytes: Buffer, offset: number, firstLine = 1): EncodingProblem {
  const likely = guessLegacyEncoding(bytes);
  return {
    line: firstLine + countLineBreaks(bytes.subarray(0, offset)),
    problem:
      `the file is not UTF-8: it looks like ${likely.name} (bytes that are not UTF-8 text, e.g. accented letters saved by an older program); ` +
      `${SAVE_AS_UTF8}, or read it as it is with --encoding ${likely.label}`,
  };
}

/** A TextDecoder label for `name`, or undefined when TextDecoder knows no such encoding. */
export function decoderLabel(name: string): string | undefined {
  try {
    return new TextDecoder(name.trim()).encoding;
  } catch {
    return undefined;
  }
}

function bomLength(head: Buffer, encoding: string): number {
  if (encoding === 'utf-8' && startsWith(head, UTF8_BOM)) return 3;
  if (encoding === 'utf-16le' && startsWith(head, [0xff, 0xfe])) return 2;
  if (encoding === 'utf-16be' && startsWith(head, [0xfe, 0xff])) return 2;
  return 0;
}

const startsWith = (head: Buffer, bytes: readonly number[]): boolean => bytes.every((byte, i) => head[i] === byte);

/** UTF-16 text of Latin script has a NUL in every other byte; UTF-8 and legacy text have none. */
function utf16WithoutBom(head: Buffer): 'utf-16le' | 'utf-16be' | undefined {
  const pairs = Math.floor(Math.min(head.length, 4096) / 2);
  if (pairs < 2) return undefined;
  let evenNul = 0;
  let oddNul = 0;
  for (let i = 0; i < pairs; i++) {
    if (head[2 * i] === 0) evenNul++;
    if (head[2 * i + 1] === 0) oddNul++;
  }
  if (oddNul >= pairs * 0.3 && evenNul < pairs * 0.05) return 'utf-16le';
  if (evenNul >= pairs * 0.3 && oddNul < pairs * 0.05) return 'utf-16be';
  return undefined;
}

/**
 * The offset of the first byte of `bytes` that is not part of valid UTF-8, or
 * undefined when all are. With `allowCutEnd`, a sequence cut by the end of
 * `bytes` (a read chunk) is not counted as invalid.
 */
export function firstInvalidUtf8(bytes: Buffer, allowCutEnd: boolean): number | undefined {
  let i = 0;
  while (i < bytes.length) {
    const lead = bytes[i] ?? 0;
    if (lead < 0x80) {
      i++;
      continue;
    }
    const length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
    if (length === 0) return i;
    for (let k = 1; k < length; k++) {
      if (i + k >= bytes.length) return allowCutEnd ? undefined : i;
      const next = bytes[i + k] ?? 0;
      const low = k === 1 && lead === 0xe0 ? 0xa0 : k === 1 && lead === 0xf0 ? 0x90 : 0x80;
      const high = k === 1 && lead === 0xed ? 0x9f : k === 1 && lead === 0xf4 ? 0x8f : 0xbf;
      if (next < low || next > high) return i;
    }
    i += length;
  }
  return undefined;
}

/**
 * All of `bytes` decoded in `encoding`. Always in streaming mode, then
 * flushed: Node 20's TextDecoder drops Windows-1252's 0x80–0x9F (€ ’ “ ” …)
 * when it decodes a whole buffer in one call, and not in streaming mode.
 */
export function decodeAll(encoding: string, bytes: Uint8Array): string {
  const decoder = new TextDecoder(encoding);
  return decoder.decode(bytes, { stream: true }) + decoder.decode();
}

const LETTER = /\p{L}/u;
/** Whether each byte 0x80–0xFF is a letter in Windows-1252 and in Mac Roman (0x80–0x9F: Ä Å Ç É Ñ Ö Ü á à â ä ã å ç é è ê ë …). */
const letterIn = (encoding: string): boolean[] => [...decodeAll(encoding, Uint8Array.from({ length: 128 }, (_, i) => 0x80 + i))].map((char) => LETTER.test(char));
const WINDOWS_1252_LETTERS = letterIn('windows-1252');
const MAC_ROMAN_LETTERS = letterIn('macintosh');

/**
 * Windows-1252 or Mac Roman, whichever reads more of the high bytes as letters
 * (Windows-1252 has its letters at 0xC0–0xFF, Mac Roman at 0x80–0x9F; the
 * other's letters there are punctuation). Windows-1252 when in doubt: most
 * such files come from Excel on Windows.
 */
export function guessLegacyEncoding(bytes: Buffer): { name: string; label: string } {
  let windows = 0;
  let mac = 0;
  for (const byte of bytes.subarray(0, 64 * 1024)) {
    if (byte < 0x80) continue;
    if (WINDOWS_1252_LETTERS[byte - 0x80] === true) windows++;
    if (MAC_ROMAN_LETTERS[byte - 0x80] === true) mac++;
  }
  return mac > windows ? { name: 'Mac Roman', label: 'macintosh' } : { name: 'Windows-1252', label: 'windows-1252' };
}

function countLineBreaks(bytes: Buffer): number {
  let lines = 0;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] === 0x0a) lines++;
    else if (bytes[i] === 0x0d && bytes[i + 1] !== 0x0a) lines++;
  }
  return lines;
}

// Module constants, not literals: a literal is a new RegExp object on each call, and the reader asks for every cell.
const NOT_ASCII_TWO_BYTES = /[\u0080-\u07ff]/;
const MISREAD_TWO_BYTES = /[\u0080-\u009f]|[A-Za-z][\u0250-\u02af\u0370-\u07ff]|[\u0250-\u02af\u0370-\u07ff][A-Za-z]/;

/**
 * Text that is valid UTF-8 only by chance: a Windows-1252 capital letter
 * (0xC0–0xDF) followed by punctuation (0x80–0xBF: ’ “ ” – NBSP …) happens to
 * be a two-byte UTF-8 sequence, e.g. `É’` (C9 92) decodes to `ɒ`. Such
 * text shows C1 controls, which no text uses, or letters of blocks no name
 * list uses inside a Latin word: IPA extensions, and Greek to NKo
 * (U+0370–U+07FF). An IPA letter standing alone (`ʤ`) is text as written.
 * Returns the offending character, or undefined.
 */
export function legacyReadAsUtf8(text: string): string | undefined {
  // Plain text is the common case: nothing to look at.
  if (!NOT_ASCII_TWO_BYTES.test(text)) return undefined;
  const misread = MISREAD_TWO_BYTES.exec(text);
  if (!misread) return undefined;
  return [...misread[0]].find((char) => !/[A-Za-z]/.test(char));
}

// ---------------------------------------------------------------------------
// Delimiter and header line

export interface HeaderPlace {
  delimiter: string;
  /** Lines before the header to drop (a `sep=` line, titles). */
  skipLines: number;
  /** Characters of those lines, their line breaks included. */
  skipChars: number;
  /** True when the first line was `sep=X` (a spreadsheet hides it: it is no row). */
  sepLine: boolean;
}

const DELIMITER_NAMES: Readonly<Record<string, string>> = { ',': 'commas', ';': 'semicolons (;)', '\t': 'tabs', '|': 'vertical bars (|)' };
const delimiterName = (delimiter: string): string => DELIMITER_NAMES[delimiter] ?? JSON.stringify(delimiter);

/** The lines a header is looked for in. */
const HEADER_SEARCH_LINES = 10;

/**
 * Where the header is and which delimiter splits it, from the start of the
 * decoded text (`complete` when `text` is the whole file). `isKnown` says
 * whether a header cell names a column subsync knows (trimmed, any case).
 */
export function placeHeader(text: string, complete: boolean, isKnown: (cell: string) => boolean): HeaderPlace | { problem: string } {
  const lines = splitLines(text, complete);
  const first = lines[0];
  const sep = first === undefined ? undefined : /^sep=(.)\s*$/i.exec(first.text);
  const start = sep ? 1 : 0;
  const delimiters = sep?.[1] !== undefined ? [sep[1]] : [',', ';', '\t'];
  const known = (cells: string[]): boolean => cells.length > 0 && cells.every((cell) => cell.trim() !== '' && isKnown(cell));
  const place = (index: number, delimiter: string): HeaderPlace => ({
    delimiter,
    skipLines: index,
    skipChars: lines[index]?.offset ?? text.length,
    sepLine: sep !== null && sep !== undefined,
  });

  const firstUsed = lines.findIndex((line, i) => i >= start && line.text.trim() !== '');
  if (firstUsed === -1) return place(start, delimiters[0] ?? ',');
  // A comma header with a known column is the header, its unknown columns the planning's business.
  const commaCells = namedCells(lines[firstUsed]?.text ?? '', ',');
  if (!sep && commaCells.length >= 2 && commaCells.some(isKnown)) return place(firstUsed, ',');
  for (let i = firstUsed; i < Math.min(lines.length, firstUsed + HEADER_SEARCH_LINES); i++) {
    const line = lines[i]?.text ?? '';
    if (line.trim() === '') continue;
    const delimiter = delimiters.find((d) => {
      const cells = namedCells(line, d);
      return known(cells) && (d === ',' || sep || cells.length >= 2);
    });
    if (delimiter === undefined) continue;
    if (i === firstUsed) return place(firstUsed, delimiter);
    const above = lines.slice(firstUsed, i).filter((l) => l.text.trim() !== '');
    if (above.every((l) => namedCells(l.text, delimiter).length <= 1)) return place(i, delimiter);
    return { problem: linesAboveProblem(i + 1, firstUsed + 1, above.map((l) => l.text)) };
  }

  // No line is a header beyond doubt: the first is the header, read with commas,
  // unless it is one cell that another delimiter would split.
  const line = lines[firstUsed]?.text ?? '';
  if (!sep && namedCells(line, ',').length <= 1) {
    for (const other of [';', '\t']) {
      const cells = namedCells(line, other);
      if (cells.length < 2) continue;
      const unknown = cells.filter((cell) => !isKnown(cell));
      return {
        problem:
          `the header on line ${firstUsed + 1} seems separated by ${delimiterName(other)}, not commas, but ${unknown.length === 1 ? 'one cell is not a column' : `${unknown.length} cells are not columns`} subsync knows ` +
          `(${unknown.slice(0, 5).map((cell) => showText(cell.trim())).join(', ')}), so the delimiter is not certain: ` +
          `save the file as "CSV UTF-8 (Comma delimited)", name its columns (--map), or put "sep=${other === '\t' ? '\\t' : other}" on a first line of its own`,
      };
    }
  }
  return place(firstUsed, sep?.[1] ?? ',');
}

function linesAboveProblem(headerLine: number, firstLine: number, above: string[]): string {
  const range = headerLine - 1 === firstLine ? `line ${firstLine}` : `lines ${firstLine} to ${headerLine - 1}`;
  const powershell = above.some((line) => /^#TYPE\b/i.test(line.trim()))
    ? ' (a "#TYPE" line is what Windows PowerShell 5.1\'s Export-Csv writes: add -NoTypeInformation)'
    : '';
  return `the header is on line ${headerLine}, not on line ${firstLine}: remove ${range} above it${powershell}, so that the header is the first line, and drop the file in again`;
}

/**
 * A header cell's text for a message: invisible and control characters shown
 * as `<U+200B>`, card-number-like digit runs masked (a file without a header
 * has data on its first line).
 */
export function showText(text: string): string {
  return JSON.stringify(scrubCardNumbers(text).replace(INVISIBLE_OR_CONTROL, (char) => `<${codePointName(char)}>`));
}

/** Zero-width and directional characters, NBSP and BOM, and control characters. */
const INVISIBLE_OR_CONTROL = /[\u0000-\u001f\u007f-\u009f\u00a0\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

/** `U+200B` for a zero-width space. */
export const codePointName = (char: string): string => `U+${(char.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')}`;

/** The cells of `line` split by `delimiter` (quotes respected, doubled quotes kept), trailing empty cells dropped. */
function namedCells(line: string, delimiter: string): string[] {
  const cells: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const char = line[i] ?? '';
    if (quoted) {
      if (char === '"' && line[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (char === '"') quoted = false;
      else cell += char;
    } else if (char === '"' && cell.trim() === '') quoted = true;
    else if (char === delimiter) {
      cells.push(cell);
      cell = '';
    } else cell += char;
  }
  cells.push(cell);
  while (cells.length > 0 && (cells[cells.length - 1] ?? '').trim() === '') cells.pop();
  return cells;
}

/** The first lines of `text` with their character offsets; a last line without its break only when the text is complete. */
function splitLines(text: string, complete: boolean): { text: string; offset: number }[] {
  const lines: { text: string; offset: number }[] = [];
  const pattern = /\r\n|\r|\n/g;
  let offset = 0;
  for (let match = pattern.exec(text); match !== null && lines.length < 64; match = pattern.exec(text)) {
    // A CR at the very end may be the first half of a CRLF cut by the read.
    if (!complete && match[0] === '\r' && match.index === text.length - 1) break;
    lines.push({ text: text.slice(offset, match.index), offset });
    offset = match.index + match[0].length;
  }
  if (complete && offset < text.length) lines.push({ text: text.slice(offset), offset });
  if (lines.length < 64) lines.push({ text: '', offset: text.length });
  return lines;
}
