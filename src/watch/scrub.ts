/**
 * Card numbers out of what the watcher keeps: error files never carry one,
 * and a rejected file that may hold one is not kept at all.
 *
 * - {@link scrubCardNumbers} masks every run of 12 or more digits, whatever
 *   separates them (up to three of space, tab, dash, dot or slash between digits, as in `4111 - 1111`), to
 *   its last four (src/secrets.ts): `4111 1111-1111.1111` becomes `************1111`. Longer
 *   runs than a card's 19 digits are masked too: better a masked order number
 *   than a card number left in a run of digits beside it.
 * - {@link containsCardNumber} tells whether a file holds a card-number-shaped
 *   run (12–19 digits, same separators) that passes the Luhn check, read in
 *   chunks whatever the file's size.
 */
import { createReadStream } from 'node:fs';
import { scrubSecrets } from '../secrets.js';

/** What containsCardNumber looks for (scrubSecrets masks the same runs, slashes too). */
const DIGIT_RUN = /\d(?:[ \t./-]{0,3}\d){11,}/g;

/** `text` with every run of 12+ digits (any separators) masked to its last four: {@link scrubSecrets}. */
export function scrubCardNumbers(text: string): string {
  return scrubSecrets(text);
}

/** The Luhn check of a string of digits. */
export function luhnOk(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

/** Whether a digit run of 12+ digits holds 12–19 consecutive digits that pass Luhn (a card number inside a longer run). */
function holdsCard(run: string): boolean {
  const digits = run.replace(/\D/g, '');
  for (let length = 12; length <= Math.min(19, digits.length); length++) {
    for (let start = 0; start + length <= digits.length; start++) if (luhnOk(digits.slice(start, start + length))) return true;
  }
  return false;
}

/** Characters carried from one chunk to the next, so a run cut by a chunk boundary is still seen whole. */
const CARRY = 64;

/** Whether the file holds a Luhn-valid card-number-shaped digit run anywhere. */
export async function containsCardNumber(file: string): Promise<boolean> {
  let carry = '';
  for await (const read of createReadStream(file, { encoding: 'latin1' })) {
    const text = carry + (read as string);
    for (const match of text.matchAll(DIGIT_RUN)) if (holdsCard(match[0])) return true;
    carry = text.slice(-CARRY);
  }
  return false;
}
