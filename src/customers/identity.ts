/**
 * Who a row is about, as keys that compare equal when two texts mean the same
 * person or record. Pure: used by the producer (the same person twice in one
 * file), the customer index in Redis (the service's customers by key) and the
 * workers (a create whose person already exists).
 *
 * - An **identity** is first name, last name and email together: two rows, or
 *   a row and a customer, with the same identity are the same person.
 * - A **field key** is one customer field's value (the `--match` field of an
 *   upsert, a CustomerID, a PaymentMethodKey).
 *
 * Normalising: Unicode NFC (an `é` typed as one code point or as `e` plus an
 * accent is the same letter), invisible characters dropped (zero-width
 * spaces, soft hyphens, byte-order marks, directional marks: spreadsheets and
 * web forms leave them behind), no-break spaces read as spaces, runs of
 * spaces as one, trimmed, lower-cased. Emails lose every space.
 */
import { hash } from 'node:crypto';
import { keptRecently } from '../memo.js';

/** Zero-width and directional characters, the BOM and the soft hyphen: never part of a name or an address. */
export const INVISIBLE = /[\u00AD\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]/g;
const SPACES = /[\s\u00A0\u2007\u202F]+/g;
/**
 * Printable ASCII only, as nearly every name and email is: already NFC,
 * nothing invisible, and the space its only whitespace, so only runs of
 * spaces are left to collapse (NFC and the invisible characters' pass cost
 * about as much as the rest).
 */
const PRINTABLE_ASCII = /^[\x20-\x7E]*$/;
const SPACE_RUNS = / {2,}/g;

/** A name or any text field as compared: NFC, invisible characters dropped, spaces collapsed, trimmed, lower-case. */
export function normalizeText(value: string): string {
  if (PRINTABLE_ASCII.test(value)) return value.replace(SPACE_RUNS, ' ').trim().toLowerCase();
  return value.normalize('NFC').replace(INVISIBLE, '').replace(SPACES, ' ').trim().toLowerCase();
}

/** An email address as compared: as text, without any space. */
export function normalizeEmail(value: string): string {
  return normalizeText(value).replace(/ /g, '');
}

/** The three fields that say who a customer is. */
export interface Person {
  FirstName: string;
  LastName: string;
  EmailAddress: string;
}

/** The identity key of a person (first name, last name, email): equal for the same person however written. */
export function identityKey(person: Person): string {
  return `i\u0000${normalizeText(person.FirstName)}\u0000${normalizeText(person.LastName)}\u0000${normalizeEmail(person.EmailAddress)}`;
}

/** The key of one field's value; emails are compared as emails. */
export function fieldKey(field: string, value: string): string {
  return `f\u0000${field}\u0000${field === 'EmailAddress' ? normalizeEmail(value) : normalizeText(value)}`;
}

/** Bytes of a key's digest: 64 bits, so a million keys collide with a chance of about 3 in 100 million. */
export const DIGEST_BYTES = 8;

/**
 * A key's digest: the first 8 bytes of its SHA-256. Stable across processes
 * and machines. Kept for keys asked again soon (lookups and claims of rows
 * that run at once), so the same buffer may be answered for the same key:
 * never write into it.
 */
export const digestOf: (key: string) => Buffer = keptRecently(4096, (key) => freshDigestOf(key));

/**
 * {@link digestOf} without keeping it: for a key asked once (the producer's
 * duplicate guard sees each row's keys once, and keeping them only churned the kept ones).
 */
export function freshDigestOf(key: string): Buffer {
  // One-shot, answered as latin1 ('binary': a character a byte): a Hash object, or a Buffer answer, costs several times the hash of a short key.
  return Buffer.from(hash('sha256', key, 'binary').slice(0, DIGEST_BYTES), 'latin1');
}

