import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CardKeyError, isSealed, openSecrets, sealSecrets, type CardKeyring } from '../../src/cards/crypto.js';

const CARD = '4111111111111111';
const CVC = '737';
const secrets = { AccountNumber: CARD, CVCode: CVC };

const keyring = (id = 'k1', key: Buffer = randomBytes(32)): CardKeyring => ({ current: { id, key } });

/** Calls fn and returns the CardKeyError it throws. */
function cardKeyError(fn: () => unknown): CardKeyError {
  try {
    fn();
  } catch (error) {
    if (error instanceof CardKeyError) return error;
    throw error;
  }
  throw new Error('expected a CardKeyError');
}

/** Replaces one character of a token's part (1 = key id … 4 = ciphertext) by another valid, canonical one. */
function alterPart(token: string, part: number): string {
  const parts = token.split('.');
  const text = parts[part] ?? '';
  const bytes = Buffer.from(text, 'base64url');
  bytes[0] = (bytes[0] ?? 0) ^ 0x01;
  parts[part] = bytes.toString('base64url');
  return parts.join('.');
}

describe('card secrets', () => {
  it('round-trips a record of strings', () => {
    const ring = keyring();
    const token = sealSecrets(ring, secrets);
    expect(isSealed(token)).toBe(true);
    expect(token.startsWith('v1.k1.')).toBe(true);
    expect(openSecrets(ring, token)).toEqual(secrets);
    expect(openSecrets(ring, sealSecrets(ring, {}))).toEqual({});
    const odd = { 'Name "quoted"': 'Zoë 💳', Empty: '' };
    expect(openSecrets(ring, sealSecrets(ring, odd))).toEqual(odd);
  });

  it('uses a fresh IV each time', () => {
    const ring = keyring();
    const a = sealSecrets(ring, secrets);
    const b = sealSecrets(ring, secrets);
    expect(a).not.toBe(b);
    expect(a.split('.')[2]).not.toBe(b.split('.')[2]);
  });

  it('never hands out an IV twice, across many tokens (IVs are cut from a pool of random bytes)', () => {
    const ring = keyring();
    const ivs = new Set(Array.from({ length: 3000 }, () => sealSecrets(ring, secrets).split('.')[2]));
    expect(ivs.size).toBe(3000);
  });

  it('refuses what is not a record of strings, plain object or not', () => {
    const ring = keyring();
    for (const bad of [{ AccountNumber: 4111 }, [CARD], null, { toString: () => CARD, n: 1 }] as unknown as Array<Record<string, string>>) {
      expect(cardKeyError(() => sealSecrets(ring, bad)).code).toBe('CARD_DATA_INVALID');
    }
    const bare = Object.assign(Object.create(null) as Record<string, string>, { CVCode: CVC });
    expect(openSecrets(ring, sealSecrets(ring, bare))).toEqual({ CVCode: CVC });
  });

  it('hides the card number, the CVC and their lengths', () => {
    const ring = keyring();
    const token = sealSecrets(ring, secrets);
    expect(token).not.toContain(CARD);
    expect(token).not.toContain(CVC);
    expect(token).not.toContain(Buffer.from(CARD).toString('base64url'));
    expect(token).not.toContain(Buffer.from(JSON.stringify(secrets)).toString('base64url').slice(0, 12));
    const amex = sealSecrets(ring, { AccountNumber: '378282246310005', CVCode: '1234' });
    expect(amex.length).toBe(token.length);
  });

  it('detects tampering with the IV, the tag, the ciphertext or the label', () => {
    const ring: CardKeyring = { current: { id: 'k2', key: randomBytes(32) }, previous: [{ id: 'k1', key: randomBytes(32) }] };
    const token = sealSecrets(ring, secrets);
    const relabelled = token.replace(/^v1\.k2\./, 'v1.k1.');
    const truncated = token.slice(0, -4);
    const tagLastChar = token.split('.');
    const tag = tagLastChar[3] ?? '';
    // A non-canonical last character decodes to the same bytes in Node: refused anyway.
    tagLastChar[3] = tag.slice(0, -1) + String.fromCharCode((tag.at(-1) ?? 'A').charCodeAt(0) + 1);
    for (const bad of [alterPart(token, 2), alterPart(token, 3), alterPart(token, 4), relabelled, truncated, tagLastChar.join('.'), 'v2' + token.slice(2), '', 'not a token']) {
      const error = cardKeyError(() => openSecrets(ring, bad));
      expect(error.code).toBe('CARD_DATA_TAMPERED');
      expect(error.message).not.toContain(CARD);
    }
  });

  it('refuses a token sealed under a different key with the same id', () => {
    const token = sealSecrets(keyring('k1'), secrets);
    expect(cardKeyError(() => openSecrets(keyring('k1'), token)).code).toBe('CARD_DATA_TAMPERED');
  });

  it('opens tokens sealed before a rotation with a previous key, and seals with the current one', () => {
    const oldKey = { id: 'k1', key: randomBytes(32) };
    const oldToken = sealSecrets({ current: oldKey }, secrets);
    const rotated: CardKeyring = { current: { id: 'k2', key: randomBytes(32) }, previous: [oldKey] };
    expect(openSecrets(rotated, oldToken)).toEqual(secrets);
    const newToken = sealSecrets(rotated, secrets);
    expect(newToken.startsWith('v1.k2.')).toBe(true);
    expect(openSecrets(rotated, newToken)).toEqual(secrets);
  });

  it('names an unknown key id', () => {
    const token = sealSecrets(keyring('retired-2024'), secrets);
    const error = cardKeyError(() => openSecrets(keyring('k9'), token));
    expect(error.code).toBe('CARD_KEY_UNKNOWN');
    expect(error.keyId).toBe('retired-2024');
    expect(error.message).toContain('retired-2024');
    expect(error.message).not.toContain(CARD);
    expect(error.message).not.toContain(CVC);
  });

  it('refuses keys that are not 32 bytes, and bad key ids', () => {
    for (const length of [0, 16, 31, 33, 64]) {
      const error = cardKeyError(() => sealSecrets(keyring('k1', randomBytes(length)), secrets));
      expect(error.code).toBe('CARD_KEY_INVALID');
    }
    const token = sealSecrets(keyring('k1'), secrets);
    expect(cardKeyError(() => openSecrets(keyring('k1', randomBytes(31)), token)).code).toBe('CARD_KEY_INVALID');
    for (const id of ['', 'has.dot', 'x'.repeat(33)]) {
      expect(cardKeyError(() => sealSecrets(keyring(id), secrets)).code).toBe('CARD_KEY_INVALID');
    }
  });

  it('recognises the token shape', () => {
    expect(isSealed(CARD)).toBe(false);
    expect(isSealed('v1.k1.abc')).toBe(false);
    expect(isSealed(`${sealSecrets(keyring(), secrets)}.extra`)).toBe(false);
  });
});
