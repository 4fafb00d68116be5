/**
 * Secrets out of every text subsync keeps or prints (PCI
 * DSS requirement 3): one function, {@link scrubSecrets}, applied where a
 * text is born or leaves: an API error's message (src/api/errors.ts), a
 * row's stored note (src/api/decision.ts, src/rows/protocol.ts), the logger's `err`
 * serializer (src/log.ts), the results files and the dashboard.
 *
 * What it removes:
 * - the secrets it is told of (a row's card number, CVC and password, as
 *   they were sent): a digit secret in any form, its digits with any
 *   separators between them (`4111.1111.1111.1111`, `7 3 7`), standing
 *   alone (not inside a longer number); a card number is masked to its last
 *   four, a CVC becomes `***`; a password becomes {@link PASSWORD_MASK}
 *   wherever it appears (one shorter than {@link SHORT_PASSWORD} only where it
 *   stands alone, or every word holding its letters would be cut);
 * - whatever it is not told of: every run of 12 or more digits, spaces,
 *   tabs, dashes, dots, slashes or underscores between them (up to three at a
 *   time), masked to its last four. Runs longer than a card's 19 digits are
 *   masked too: better a masked order number than a card number left in a
 *   run of digits beside it.
 *
 * A service that answers "card <16 digits> (<the same, with dots>) cvc 737
 * was declined" is stored as "card ************1111 (************1111) cvc
 * *** was declined" (the last four of the number kept). Data cells are not passed through it (a phone
 * number is a dozen digits with spaces): columns are masked by what they
 * hold (src/csv/rows.ts, maskCells).
 */

/** What a password is written as in the ledger, the result files and the dashboard. */
export const PASSWORD_MASK = '********';
/** What a CVC quoted in a message becomes. */
export const CVC_MASK = '***';
/** Passwords shorter than this are scrubbed only where they stand alone. */
export const SHORT_PASSWORD = 4;

/** Characters that may separate the digits of a card number or CVC as people and services write them. */
const SEPARATOR = '[\\s./_\\-\\u2010-\\u2015]';
/** A run of 12 or more digits, up to three separators between any two: the shape of a card number. */
const DIGIT_RUN = new RegExp(`(?<!\\d)\\d(?:${SEPARATOR}{0,3}\\d){11,}(?!\\d)`, 'g');

/** The secrets of one row (or request) a text is scrubbed of. Empty values are ignored. */
export type KnownSecrets = readonly string[];

/** The last four digits, the others as `*`. */
function maskDigits(run: string): string {
  const digits = run.replace(/\D/g, '');
  return digits.length <= 4 ? digits : `${'*'.repeat(digits.length - 4)}${digits.slice(-4)}`;
}

const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * The digits of `digits` with any separators between them, standing alone: no
 * digit (nor a `*` of a mask already written) right before, no digit after.
 */
function digitsPattern(digits: string): RegExp {
  return new RegExp(`(?<![\\d*])${[...digits].join(`${SEPARATOR}{0,3}`)}(?!\\d)`, 'g');
}

/** One known secret as a replacement: a pattern and what it becomes. */
interface Rule {
  pattern: RegExp;
  replace: (match: string) => string;
}

function rulesFor(known: KnownSecrets): Rule[] {
  const rules: Rule[] = [];
  // Longest first: a CVC's digits may occur inside the card number.
  const values = [...new Set(known.map((value) => value.trim()).filter((value) => value !== ''))].sort((a, b) => b.length - a.length);
  for (const value of values) {
    const digits = value.replace(/[\s./_\-\u2010-\u2015]/g, '');
    if (/^\d+$/.test(digits) && digits.length >= 3) {
      rules.push({ pattern: digitsPattern(digits), replace: digits.length >= 12 ? maskDigits : () => CVC_MASK });
    }
    if (!/^\d+$/.test(value)) {
      // A password (or any text secret): as written, case and all.
      const escaped = escapeRegExp(value);
      const pattern = value.length >= SHORT_PASSWORD ? new RegExp(escaped, 'g') : new RegExp(`(?<![\\p{L}\\p{N}])${escaped}(?![\\p{L}\\p{N}])`, 'gu');
      rules.push({ pattern, replace: () => PASSWORD_MASK });
    }
  }
  return rules;
}

/**
 * `text` without the `known` secrets in any form, and without any
 * card-number-shaped digit run (see the module comment). Idempotent.
 */
export function scrubSecrets(text: string, known: KnownSecrets = []): string {
  return scrubberFor(known)(text);
}

/** {@link scrubSecrets} bound to one row's secrets, for the several texts of one error. */
export function scrubberFor(known: KnownSecrets): (text: string) => string {
  const rules = rulesFor(known);
  return (text) => {
    let out = text;
    for (const rule of rules) out = out.replace(rule.pattern, rule.replace);
    return out.replace(DIGIT_RUN, maskDigits);
  };
}

/** True when `text` holds something {@link scrubSecrets} would change. */
export function holdsSecrets(text: string, known: KnownSecrets = []): boolean {
  return scrubSecrets(text, known) !== text;
}

/**
 * The error's texts scrubbed in place: its message, its stack (which repeats
 * the message it was made with), and its cause's, down the chain. An Error's
 * message and stack are its own writable properties, so the error keeps its
 * class (checks such as `instanceof UnrecoverableError` still hold). For an
 * ApiError, whose fields are read-only, use its `scrubbed()` instead.
 */
export function scrubErrorInPlace(error: Error, scrub: (text: string) => string): Error {
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (current instanceof Error && !seen.has(current)) {
    seen.add(current);
    current.message = scrub(current.message);
    if (current.stack !== undefined) current.stack = scrub(current.stack);
    current = current.cause;
  }
  return error;
}
