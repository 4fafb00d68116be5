/**
 * Cell text as spreadsheets and other tools leave it: the formula escape of
 * subsync's own files, invisible characters around identifiers, UTF-8 text
 * that was read as Windows-1252 and saved again, and numbers a spreadsheet
 * stored as numbers. Pure functions; src/csv/rows.ts applies them.
 */
import { FORMULA_TRIGGERS } from '../results/formula.js';
import { INVISIBLE_CHARACTERS } from './columns.js';
import { codePointName, decodeAll, firstInvalidUtf8 } from './sniff.js';

/**
 * A cell without the formula escape subsync's exports, results.csv and
 * errors.csv write (src/results/formula.ts): exactly one leading `'` followed
 * by a formula trigger is dropped; any other `'` is the operator's.
 */
export function unescapeFormula(cell: string): string {
  const second = cell[1];
  return cell[0] === "'" && second !== undefined && FORMULA_TRIGGERS.has(second) ? cell.slice(1) : cell;
}

const SURROUNDING = new RegExp(`^[\\s${INVISIBLE_CHARACTERS}]+|[\\s${INVISIBLE_CHARACTERS}]+$`, 'g');
const INSIDE = new RegExp(`[${INVISIBLE_CHARACTERS}]`, 'g');

const ANY_INVISIBLE = new RegExp(`[${INVISIBLE_CHARACTERS}]`);

/** Text without spaces and invisible characters around it (NBSP, zero-width, BOM, directional marks). */
export function trimInvisible(text: string): string {
  // Every invisible character and space is past ASCII or a space: text that begins and ends in another ASCII character has none around it.
  const first = text.charCodeAt(0);
  const last = text.charCodeAt(text.length - 1);
  if (first > 0x20 && first < 0x7f && last > 0x20 && last < 0x7f) return text;
  return text.replace(SURROUNDING, '');
}

const NO_INVISIBLES: readonly string[] = [];

/** The invisible characters inside `text`, named `U+200B`, in order, each once. */
export function invisibleInside(text: string): readonly string[] {
  if (!ANY_INVISIBLE.test(text)) return NO_INVISIBLES;
  return [...new Set(text.match(INSIDE) ?? [])].map(codePointName);
}

/** Windows-1252's characters for the bytes 0x80–0xFF, and back. */
const HIGH_BYTES = Uint8Array.from({ length: 128 }, (_, i) => 0x80 + i);
const BYTE_OF = new Map<string, number>([...decodeAll('windows-1252', HIGH_BYTES)].map((char, i) => [char, 0x80 + i]));
const LEADS = [...BYTE_OF].filter(([, byte]) => byte >= 0xc2 && byte <= 0xf4).map(([char]) => char).join('');
const CONTINUATIONS = [...BYTE_OF].filter(([, byte]) => byte >= 0x80 && byte <= 0xbf).map(([char]) => char).join('');
const escapeClass = (chars: string): string => chars.replace(/[\\\]^-]/g, '\\$&');
const MISDECODED = new RegExp(`[${escapeClass(LEADS)}][${escapeClass(CONTINUATIONS)}]{1,3}`, 'g');
/** {@link MISDECODED} without its flag: whether it matches at all, without the iterator and regex copy matchAll makes. */
const ANY_MISDECODED = new RegExp(MISDECODED.source);
/** A lead character. Module constants, not literals: a literal is a new RegExp object on each call, and this runs for every cell. */
const ANY_LEAD = /[\u00c2-\u00f4]/;

/**
 * The first sign of UTF-8 read as Windows-1252 and saved again: `Ã«` for `ë`,
 * `â€™` for `’`. A lead character and its continuations are turned back into
 * bytes, and only a sequence that is then whole UTF-8 counts.
 */
export function misdecodedUtf8(text: string): { found: string; meant: string } | undefined {
  // Accented names hold lead characters (ë is one) on nearly every row; a lead followed by a continuation is rare.
  if (!ANY_LEAD.test(text) || !ANY_MISDECODED.test(text)) return undefined;
  for (const match of text.matchAll(MISDECODED)) {
    const bytes = Buffer.from([...match[0]].map((char) => BYTE_OF.get(char) ?? 0));
    const lead = bytes[0] ?? 0;
    const length = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (bytes.length < length) continue;
    const sequence = bytes.subarray(0, length);
    if (firstInvalidUtf8(sequence, false) !== undefined) continue;
    return { found: [...match[0]].slice(0, length).join(''), meant: sequence.toString('utf8') };
  }
  return undefined;
}

/** A number as a spreadsheet writes one it stored as a number: `4.01289E+15`, `100001.0`. */
export const SCIENTIFIC_NOTATION = /^\d+(?:[.,]\d+)?E\+?\d+$/i;
export const WHOLE_FLOAT = /^\d+[.,]0+$/;

/**
 * A 16–19-digit number whose digits past the 15th significant one are all 0:
 * a spreadsheet keeps 15 significant digits and writes zeros for the rest.
 */
export const roundedPast15Digits = (digits: string): boolean => /^\d{16,19}$/.test(digits) && /^0*[1-9]\d{14}0+$/.test(digits) && /0$/.test(digits);
