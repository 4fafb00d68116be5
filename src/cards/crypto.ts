/**
 * Card fields at rest (PCI DSS requirement 3): the
 * AccountNumber and CVCode of a job are never stored in plaintext in Redis.
 * A row's card fields are sealed together into one token with AES-256-GCM:
 *
 *   v1.<keyId>.<iv>.<tag>.<ciphertext>     (the last three base64url, no padding)
 *
 * - `v1` names this format; a later one can be read beside it.
 * - `keyId` names the key, so keys can be rotated: tokens sealed under a
 *   previous key still open while the keyring lists it.
 * - The IV is 12 random bytes per token (never reused under one key by
 *   construction: 2^96 space, far from the birthday bound at import volumes).
 * - The version and key id are authenticated as additional data, so a token
 *   relabelled to another key or version fails as tampered.
 * - The plaintext is the JSON of the record, padded with spaces (which JSON
 *   ignores) to a multiple of 64 bytes, so a token's length does not tell a
 *   15-digit card from a 16-digit one.
 *
 * Errors never carry plaintext, keys or ciphertext: only codes and key ids.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { SubsyncError } from '../errors.js';

/** The key for one id: 32 bytes (AES-256). */
export interface CardKey {
  id: string;
  key: Buffer;
}

/**
 * The keys card tokens are sealed and opened with. `current` seals every new
 * token; `previous` keys only open tokens sealed before a rotation. Ids are
 * 1 to 32 characters among letters, digits, `_` and `-` (as SUBSYNC_CARD_KEY_ID).
 * If two entries share an id, `current` wins, then the first in `previous`.
 */
export interface CardKeyring {
  current: CardKey;
  previous?: ReadonlyArray<CardKey>;
}

/** Stable codes; call sites branch on these, never on message text. */
export type CardKeyErrorCode =
  /** A key is not 32 bytes, or its id is not a valid key id. A configuration error. */
  | 'CARD_KEY_INVALID'
  /** The token names a key id the keyring does not hold (a key retired too early, or a different deployment's key). */
  | 'CARD_KEY_UNKNOWN'
  /** The token is malformed or fails authentication: altered, truncated, or sealed under a different key with the same id. */
  | 'CARD_DATA_TAMPERED'
  /** What was given to seal, or what an authentic token holds, is not a record of strings. */
  | 'CARD_DATA_INVALID';

export class CardKeyError extends SubsyncError {
  readonly code: CardKeyErrorCode;
  /** The key id concerned, when there is one. Ids are not secret. */
  readonly keyId: string | undefined;

  constructor(code: CardKeyErrorCode, message: string, keyId?: string) {
    super(message);
    this.code = code;
    this.keyId = keyId;
  }
}

/** AES-256: the key length in bytes. */
export const CARD_KEY_BYTES = 32;
const ALGORITHM = 'aes-256-gcm';
const VERSION = 'v1';
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** The plaintext is padded to a multiple of this many bytes. */
const PAD_BYTES = 64;
const KEY_ID_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;
/** 12 bytes are 16 base64url characters, 16 bytes are 22. */
const TOKEN_PATTERN = /^v1\.([A-Za-z0-9_-]{1,32})\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]+)$/;

const SecretsSchema = z.record(z.string(), z.string());

/** Seals a row's card fields (e.g. `{ AccountNumber, CVCode }`) under the keyring's current key. */
export function sealSecrets(keyring: CardKeyring, secrets: Record<string, string>): string {
  const { id, key } = keyring.current;
  if (checkedKeys.get(key) !== id) {
    checkKey(id, key);
    checkedKeys.set(key, id);
  }
  // The schema is asked only about what is not plainly a record of strings (the producer seals a row at a time).
  let record = secrets;
  if (!isPlainRecordOfStrings(secrets)) {
    const parsed = SecretsSchema.safeParse(secrets);
    if (!parsed.success) throw new CardKeyError('CARD_DATA_INVALID', 'card secrets to seal must be a record of strings');
    record = parsed.data;
  }

  const json = JSON.stringify(record);
  const length = Buffer.byteLength(json, 'utf8');
  const plaintext = Buffer.from(json.padEnd(json.length + (PAD_BYTES - (length % PAD_BYTES)) % PAD_BYTES, ' '), 'utf8');
  const iv = freshIv();
  const cipher = createCipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(additionalData(id));
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  plaintext.fill(0);
  return [VERSION, id, toBase64Url(iv), toBase64Url(cipher.getAuthTag()), toBase64Url(ciphertext)].join('.');
}

/** Opens a token sealed by `sealSecrets` with whichever keyring key its id names. */
export function openSecrets(keyring: CardKeyring, token: string): Record<string, string> {
  const match = TOKEN_PATTERN.exec(token);
  const [, keyId, ivText, tagText, ciphertextText] = match ?? [];
  if (keyId === undefined || ivText === undefined || tagText === undefined || ciphertextText === undefined) {
    throw new CardKeyError('CARD_DATA_TAMPERED', 'card data is not a v1 card token');
  }
  const entry = findKey(keyring, keyId);
  if (entry === undefined) {
    throw new CardKeyError('CARD_KEY_UNKNOWN', `card data was sealed with key id "${keyId}", which the keyring does not hold`, keyId);
  }
  checkKey(entry.id, entry.key);
  const iv = fromBase64Url(ivText);
  const tag = fromBase64Url(tagText);
  const ciphertext = fromBase64Url(ciphertextText);
  if (iv === undefined || tag === undefined || ciphertext === undefined) {
    throw new CardKeyError('CARD_DATA_TAMPERED', 'card data is not a v1 card token', keyId);
  }

  const decipher = createDecipheriv(ALGORITHM, entry.key, iv, { authTagLength: TAG_BYTES });
  decipher.setAAD(additionalData(keyId));
  decipher.setAuthTag(tag);
  const head = decipher.update(ciphertext);
  let plaintext: Buffer;
  try {
    plaintext = Buffer.concat([head, decipher.final()]);
  } catch {
    // Unauthenticated bytes are discarded, never parsed.
    head.fill(0);
    throw new CardKeyError('CARD_DATA_TAMPERED', `card data failed authentication under key id "${keyId}"`, keyId);
  }
  head.fill(0);

  let decoded: unknown;
  try {
    decoded = JSON.parse(plaintext.toString('utf8'));
  } catch {
    decoded = undefined;
  } finally {
    plaintext.fill(0);
  }
  const parsed = SecretsSchema.safeParse(decoded);
  if (!parsed.success) throw new CardKeyError('CARD_DATA_INVALID', 'authentic card data is not a record of strings', keyId);
  return parsed.data;
}

/** True when the value has the shape of a sealed token (it is not opened, so not proof of authenticity). */
export function isSealed(value: string): boolean {
  return TOKEN_PATTERN.test(value);
}

function findKey(keyring: CardKeyring, id: string): CardKey | undefined {
  if (keyring.current.id === id) return keyring.current;
  return keyring.previous?.find((entry) => entry.id === id);
}

function checkKey(id: string, key: Buffer): void {
  if (!KEY_ID_PATTERN.test(id)) {
    throw new CardKeyError('CARD_KEY_INVALID', 'card key id must be 1 to 32 characters among letters, digits, "_" and "-"');
  }
  if (!Buffer.isBuffer(key) || key.length !== CARD_KEY_BYTES) {
    throw new CardKeyError('CARD_KEY_INVALID', `card key "${id}" must be exactly ${CARD_KEY_BYTES} bytes`, id);
  }
}

/** The version and key id, bound to the ciphertext by GCM; made once per key id (GCM only reads it). */
function additionalData(keyId: string): Buffer {
  let data = additionalDataOf.get(keyId);
  if (data === undefined) {
    data = Buffer.from(`${VERSION}.${keyId}`, 'utf8');
    additionalDataOf.set(keyId, data);
  }
  return data;
}
const additionalDataOf = new Map<string, Buffer>();

/** Keys already checked, with the id they were checked under (a key's length cannot change). */
const checkedKeys = new WeakMap<Buffer, string>();

/**
 * IVs are cut from one larger read of the system's random source: a read
 * per token cost more than the sealing itself. Each IV is handed out once,
 * and a spent pool is replaced, never refilled, so an IV already handed out
 * never changes.
 */
const IV_POOL_BYTES = IV_BYTES * 512;
let ivPool = Buffer.alloc(0);
let ivAt = 0;

function freshIv(): Buffer {
  if (ivAt + IV_BYTES > ivPool.length) {
    ivPool = randomBytes(IV_POOL_BYTES);
    ivAt = 0;
  }
  const iv = ivPool.subarray(ivAt, ivAt + IV_BYTES);
  ivAt += IV_BYTES;
  return iv;
}

/** A plain object whose members are all strings, which the secrets schema surely takes as it is. */
function isPlainRecordOfStrings(value: unknown): value is Record<string, string> {
  if (typeof value !== 'object' || value === null || Object.getPrototypeOf(value) !== Object.prototype) return false;
  const keys = Object.keys(value);
  if (keys.length !== Reflect.ownKeys(value).length) return false;
  for (const key of keys) if (typeof (value as Record<string, unknown>)[key] !== 'string') return false;
  return true;
}

function toBase64Url(bytes: Buffer): string {
  return bytes.toString('base64url');
}

/** Strict: Node's decoder ignores stray bits in the last character, so a text that does not re-encode to itself is refused. */
function fromBase64Url(text: string): Buffer | undefined {
  const bytes = Buffer.from(text, 'base64url');
  return bytes.toString('base64url') === text ? bytes : undefined;
}
