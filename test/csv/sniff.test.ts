import { describe, expect, it } from 'vitest';
import { isKnownHeader } from '../../src/csv/columns.js';
import { chooseEncoding, decodeAll, firstInvalidUtf8, guessLegacyEncoding, legacyReadAsUtf8, placeHeader, showText } from '../../src/csv/sniff.js';
import { invisibleInside, misdecodedUtf8, roundedPast15Digits, trimInvisible, unescapeFormula } from '../../src/csv/text.js';

describe('chooseEncoding', () => {
  it('follows a BOM, else takes UTF-8', () => {
    expect(chooseEncoding(Buffer.from('\uFEFFA,B\n'))).toEqual({ encoding: 'utf-8', bomBytes: 3, declared: true });
    expect(chooseEncoding(Buffer.from('\uFEFFA', 'utf16le'))).toEqual({ encoding: 'utf-16le', bomBytes: 2, declared: true });
    expect(chooseEncoding(Buffer.from('\uFEFFA', 'utf16le').swap16())).toEqual({ encoding: 'utf-16be', bomBytes: 2, declared: true });
    expect(chooseEncoding(Buffer.from('A,B\nZoë,Müller\n'))).toEqual({ encoding: 'utf-8', bomBytes: 0, declared: false });
  });

  it('takes a named encoding, with its BOM skipped when it has one', () => {
    expect(chooseEncoding(Buffer.from('A'), 'Windows-1252')).toEqual({ encoding: 'windows-1252', bomBytes: 0, declared: true });
    expect(chooseEncoding(Buffer.from('\uFEFFA'), 'utf8')).toEqual({ encoding: 'utf-8', bomBytes: 3, declared: true });
    expect(chooseEncoding(Buffer.from('A'), 'nope')).toMatchObject({ line: 1 });
  });

  it('does not count a multi-byte character cut by the end of the bytes looked at', () => {
    const cut = Buffer.from('A,B\nZoë').subarray(0, -1);
    expect(chooseEncoding(cut)).toMatchObject({ encoding: 'utf-8' });
  });

  it('names UTF-16 without a BOM, big-endian too', () => {
    expect(chooseEncoding(Buffer.from('FirstName,LastName', 'utf16le').swap16())).toMatchObject({ line: 1, problem: expect.stringContaining('--encoding utf-16be') });
  });
});

describe('guessLegacyEncoding', () => {
  it('tells Windows-1252 from Mac Roman by which reads the high bytes as letters', () => {
    expect(guessLegacyEncoding(Buffer.from('Zoë Müller São', 'latin1')).name).toBe('Windows-1252');
    expect(guessLegacyEncoding(Buffer.from([0x5a, 0x6f, 0x91, 0x20, 0x4d, 0x9f, 0x6c]))).toEqual({ name: 'Mac Roman', label: 'macintosh' });
  });
});

describe('firstInvalidUtf8', () => {
  it('finds the first byte that is not UTF-8, overlong and surrogate forms included', () => {
    expect(firstInvalidUtf8(Buffer.from('Zoë'), false)).toBeUndefined();
    expect(firstInvalidUtf8(Buffer.from([0x41, 0xeb, 0x42]), false)).toBe(1);
    expect(firstInvalidUtf8(Buffer.from([0xc0, 0xaf]), false)).toBe(0);
    expect(firstInvalidUtf8(Buffer.from([0xed, 0xa0, 0x80]), false)).toBe(0);
    expect(firstInvalidUtf8(Buffer.from([0x41, 0xe2, 0x80]), true)).toBeUndefined();
    expect(firstInvalidUtf8(Buffer.from([0x41, 0xe2, 0x80]), false)).toBe(1);
  });
});

describe('decodeAll', () => {
  it('keeps Windows-1252\'s 0x80-0x9F', () => {
    expect(decodeAll('windows-1252', Buffer.from([0x4f, 0x92, 0x80, 0x93, 0x94]))).toBe('O’€“”');
  });
});

describe('legacyReadAsUtf8', () => {
  it('flags C1 controls, IPA letters, and Greek to NKo letters inside a Latin word', () => {
    expect(legacyReadAsUtf8('JOSɒS')).toBe('ɒ');
    expect(legacyReadAsUtf8('A\u0092B')).toBe('\u0092');
    expect(legacyReadAsUtf8('MВLLER')).toBe('В');
  });

  it('leaves names in any script alone', () => {
    for (const name of ['Zoë', 'Иван Петров', 'Ηλίας', 'דוד', 'محمد', '渡辺', 'Ștefan', 'ʻOlelo', 'Đorđe', 'Łucja 🎉', 'ʤ', 'ə ʃ']) {
      expect(legacyReadAsUtf8(name)).toBeUndefined();
    }
  });
});

describe('placeHeader', () => {
  const place = (text: string) => placeHeader(text, true, isKnownHeader);

  it('takes a comma header as it is, and a header with unknown columns too (planning names them)', () => {
    expect(place('FirstName,LastName\nA,B\n')).toEqual({ delimiter: ',', skipLines: 0, skipChars: 0, sepLine: false });
    expect(place('Given,Family\nA,B\n')).toMatchObject({ delimiter: ',', skipLines: 0 });
  });

  it('takes ; or a tab only beyond doubt', () => {
    expect(place('FirstName;LastName\nA;B\n')).toMatchObject({ delimiter: ';' });
    expect(place('"FirstName"\t"LastName"\nA\tB\n')).toMatchObject({ delimiter: '\t' });
    expect(place('Given\tFamily\n')).toMatchObject({ problem: expect.stringContaining('separated by tabs') });
    // One known column alone shows no delimiter: commas.
    expect(place('LastName\nSmith; Jones\n')).toMatchObject({ delimiter: ',' });
  });

  it('honours sep=, and skips one-cell lines above a header beyond doubt', () => {
    expect(place('sep=|\r\nFirstName|LastName\r\n')).toEqual({ delimiter: '|', skipLines: 1, skipChars: 7, sepLine: true });
    expect(place('My customers\r\n\r\nFirstName,LastName\r\n')).toEqual({ delimiter: ',', skipLines: 2, skipChars: 16, sepLine: false });
  });

  it('takes a comma line with a known column as the header, whatever follows', () => {
    expect(place('FirstName,LastName,Foo\nA,B,C\nFirstName,LastName\n')).toMatchObject({ delimiter: ',', skipLines: 0 });
  });

  it('refuses lines of several cells above the header', () => {
    expect(place('Report,May\nFirstName,LastName\n')).toEqual({
      problem: 'the header is on line 2, not on line 1: remove line 1 above it, so that the header is the first line, and drop the file in again',
    });
  });
});

describe('showText', () => {
  it('names invisible characters and masks card numbers', () => {
    expect(showText('\u200BName\u00A0')).toBe('"<U+200B>Name<U+00A0>"');
    expect(showText('4111111111111111')).toBe('"************1111"');
  });
});

describe('cell text', () => {
  it('unescapeFormula drops exactly one leading quote before a formula trigger', () => {
    expect(['\'=1+1', "'+44 20", "'-5", "'@x", "'\tx", "'\rx", "'\nx", "'\0x"].map(unescapeFormula)).toEqual(['=1+1', '+44 20', '-5', '@x', '\tx', '\rx', '\nx', '\0x']);
    expect(["''=1", "'quoted", "O'Brien", "'", '=1'].map(unescapeFormula)).toEqual(["''=1", "'quoted", "O'Brien", "'", '=1']);
  });

  it('trimInvisible and invisibleInside', () => {
    expect(trimInvisible('\u200B\u00A0 a@b.c\u200E\uFEFF\u2066')).toBe('a@b.c');
    expect(invisibleInside('A\u200BB\u202EC\u200B')).toEqual(['U+200B', 'U+202E']);
  });

  it('misdecodedUtf8 finds UTF-8 read as Windows-1252, and only that', () => {
    expect(misdecodedUtf8('ZoÃ«')).toEqual({ found: 'Ã«', meant: 'ë' });
    expect(misdecodedUtf8('Ã©cole')).toEqual({ found: 'Ã©', meant: 'é' });
    expect(misdecodedUtf8('Ã¨')).toEqual({ found: 'Ã¨', meant: 'è' });
    expect(misdecodedUtf8('O\u00e2\u20ac\u2122Brien')).toEqual({ found: 'â€™', meant: '’' });
    for (const text of ['Zoë', 'São', 'Âge', 'Ã', 'ÂB', 'Ærø', '©2024']) expect(misdecodedUtf8(text)).toBeUndefined();
  });

  it('roundedPast15Digits', () => {
    expect(roundedPast15Digits('4012888888881880')).toBe(true);
    expect(roundedPast15Digits('4012888888881000')).toBe(true);
    expect(roundedPast15Digits('4012888888881881')).toBe(false);
    expect(roundedPast15Digits('401288888888180')).toBe(false);
  });
});
