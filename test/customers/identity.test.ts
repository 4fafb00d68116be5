import { describe, expect, it } from 'vitest';
import { digestOf, fieldKey, freshDigestOf, identityKey, INVISIBLE, normalizeEmail, normalizeText } from '../../src/customers/identity.js';

// The rule as written down, with no shortcut: what every text must compare as.
const byTheRule = (value: string): string =>
  value
    .normalize('NFC')
    .replace(INVISIBLE, '')
    .replace(/[\s\u00A0\u2007\u202F]+/g, ' ')
    .trim()
    .toLowerCase();

describe('identity keys', () => {
  it('normalise plain ASCII text as the rule says, spaces, tabs and line breaks included', () => {
    const texts = ['Ada', '  Ada  Lovelace ', 'ADA\tLOVE', 'a\r\nb', 'x \t y', '', ' ', '~!@#$%^&*()_+{}|:"<>?`-=[]\\;\',./', 'Ada\u00a0Lovelace', 'Zoe\u200b', 'Cafe\u0301', 'Ångström ', '\ufeffbom'];
    for (const text of texts) {
      expect(normalizeText(text), JSON.stringify(text)).toBe(byTheRule(text));
      expect(normalizeEmail(text), JSON.stringify(text)).toBe(byTheRule(text).replace(/ /g, ''));
    }
    for (let code = 0; code < 0x3000; code++) {
      const text = ` A${String.fromCharCode(code)}b  ${String.fromCharCode(code)} `;
      expect(normalizeText(text), code.toString(16)).toBe(byTheRule(text));
    }
  });

  it('are equal for the same person however written, and their digests are the ones kept in Redis', () => {
    const key = identityKey({ FirstName: ' Dora ', LastName: 'DOUBLE', EmailAddress: 'Dora@Example.com\u200b' });
    expect(key).toBe(identityKey({ FirstName: 'dora', LastName: 'double', EmailAddress: 'dora@example.com' }));
    expect(key).toBe('i\u0000dora\u0000double\u0000dora@example.com');
    expect(fieldKey('EmailAddress', ' A B@x.example')).toBe('f\u0000EmailAddress\u0000ab@x.example');
    // The first 8 bytes of the key's SHA-256: what earlier versions wrote.
    expect(freshDigestOf(key).toString('hex')).toBe(digestOf(key).toString('hex'));
    expect(freshDigestOf('x').toString('hex')).toBe('2d711642b726b044');
  });
});
