import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_RECORD_CHARS, openCsv } from '../../src/csv/reader.js';
import { scanCsvBytes, showsRounding } from '../../src/csv/scan.js';
import { collect, tempFolder } from './files.js';

let temp: Awaited<ReturnType<typeof tempFolder>>;
beforeAll(async () => {
  temp = await tempFolder();
});
afterAll(async () => {
  await temp.remove();
});

/** What the full read says: true when openCsv reads every record. */
async function parses(file: string): Promise<boolean> {
  try {
    await collect((await openCsv(file)).rows);
    return true;
  } catch {
    return false;
  }
}

/** Enough well-formed rows to push what follows past the scan's first read chunks. */
const filler = (rows: number): string => Array.from({ length: rows }, (_, i) => `Row${i},"Quoted, ""cell""",Zoë`).join('\r\n');

describe('scanCsvBytes', () => {
  it.each([
    ['quotes, doubled quotes, commas and line breaks inside quotes, CRLF, LF and CR', 'A,B,C\r\n"x, y","say ""hi""","two\nlines"\n1,2,3\r4,5,6\n'],
    ['a BOM, then a quoted header', '\uFEFF"A",B\n1,2\n'],
    ['empty lines, blank records and no final line break', 'A,B\n\n,\n1,""'],
    ['accents and other scripts across read chunks', `A,B,C\n${filler(40_000)}\n`],
  ])('is sure of a well-formed file: %s', async (_name, content) => {
    const file = await temp.file('good.csv', content);
    expect(await scanCsvBytes(file)).toEqual({ wellFormed: true, bytes: Buffer.byteLength(content), longNumbers: { total: 0, rounded: 0 } });
    expect(await parses(file)).toBe(true);
  });

  // Each is a fault csv-parse or the reader refuses; deep in the file, past the scan's first read.
  it.each([
    ['a stray quote inside an unquoted cell', 'Ab"c,2'],
    ['text after a closing quote', '"abc"d,2'],
    ['a space after a closing quote', '"abc" ,2'],
    ['bytes that are not UTF-8', Buffer.from([0x41, 0xff, 0x42, 0x2c, 0x32])],
    ['an unclosed quote at the end', '"never closed,2'],
  ])('doubts a file with %s, which the full read rejects', async (_name, fault) => {
    const content = Buffer.concat([Buffer.from(`A,B,C\n${filler(30_000)}\n`), Buffer.from(fault), Buffer.from('\nlast,row,here\n')]);
    const file = await temp.file('bad.csv', content);
    expect((await scanCsvBytes(file)).wellFormed).toBe(false);
    expect(await parses(file)).toBe(false);
  });

  it('doubts a record longer than the reader takes', async () => {
    const file = await temp.file('long.csv', `A,B\n1,"${'x'.repeat(MAX_RECORD_CHARS + 10)}"\n`);
    expect((await scanCsvBytes(file)).wellFormed).toBe(false);
    expect(await parses(file)).toBe(false);
  });

  it('doubts an unquoted record longer than the reader takes', async () => {
    const file = await temp.file('long-unquoted.csv', `A,B\n1,${'x'.repeat(MAX_RECORD_CHARS + 10)}\n`);
    expect((await scanCsvBytes(file)).wellFormed).toBe(false);
    expect(await parses(file)).toBe(false);
  });

  // The walk skips runs of text in one loop: a character a misread file shows must still be seen
  // wherever it stands in a run (start, middle, end, across a read), and real names must not be doubted.
  it.each([
    ['a C1 control', '\u0085'],
    ['an IPA letter', '\u0250'],
    ['a Greek letter beside ASCII letters', '\u03a9'],
  ])('doubts %s inside a run of text, wherever it stands', async (_name, character) => {
    const head = 'A,B\n1,';
    // The last: the character ends the scan's first read (256 KiB), the byte after it starts the next.
    const places: Array<[before: string, after: string]> = [['', 'abc'], ['abc', 'def'], ['abc', ''], ['x'.repeat(256 * 1024 - head.length - 2), 'tail']];
    for (const [before, after] of places) {
      const content = `${head}${before}${character}${after}\n2,3\n`;
      if (before.length > 3) expect(Buffer.from(content).subarray(256 * 1024 - 2, 256 * 1024)).toEqual(Buffer.from(character));
      const file = await temp.file('misread.csv', content);
      expect((await scanCsvBytes(file)).wellFormed).toBe(false);
    }
  });

  it('is sure of the accented letters of real names inside runs of text, quoted or not', async () => {
    const names = 'Amélie Gonçalves,"Åkesson, Jürgen",Gdańsk,Straße,"Ærø ""Ñandú"""';
    const file = await temp.file('names.csv', `A,B,C,D,E\n${Array.from({ length: 5_000 }, () => names).join('\r\n')}\n`);
    expect((await scanCsvBytes(file)).wellFormed).toBe(true);
    expect(await parses(file)).toBe(true);
  });

  it('is sure of a record just under the size the reader takes (csv-parse counts bytes too)', async () => {
    const file = await temp.file('wide.csv', `A,B\n1,${'x'.repeat(MAX_RECORD_CHARS - 10)}\n`);
    expect((await scanCsvBytes(file)).wellFormed).toBe(true);
    expect(await parses(file)).toBe(true);
  });

  it('is sure of a multi-byte character cut in two by the end of a read', async () => {
    const head = 'A,B\n1,';
    // The scan reads 256 KiB at a time: the two bytes of é sit either side of the first boundary.
    const content = `${head}${'x'.repeat(256 * 1024 - head.length - 1)}é\n`;
    expect(Buffer.from(content).subarray(256 * 1024 - 1, 256 * 1024 + 1)).toEqual(Buffer.from('é'));
    const file = await temp.file('cut.csv', content);
    expect((await scanCsvBytes(file)).wellFormed).toBe(true);
  });

  it('hands every byte to onChunk, in order (the producer hashes them into the import id)', async () => {
    const content = `\uFEFFA,B,C\n${filler(50_000)}\n`;
    const file = await temp.file('hashed.csv', content);
    const hash = createHash('sha256');
    let chunks = 0;
    await scanCsvBytes(file, (chunk) => {
      chunks++;
      hash.update(chunk);
    });
    expect(chunks).toBeGreaterThan(1);
    expect(hash.digest('hex')).toBe(createHash('sha256').update(await readFile(file)).digest('hex'));
  });

  it('counts long numbers and those a spreadsheet rounded past 15 digits', async () => {
    const rounded = ['4012888888881880', '5555555555554000', '4111111111111000'];
    const genuine = ['4012888888881881', '5555555555554444'];
    const content = `PaymentMethodKey,AccountNumber,Note\n${[...rounded, ...genuine].map((n, i) => `k${i},${n},"ref ${n}1234 12.5"`).join('\n')}\n`;
    const { longNumbers } = await scanCsvBytes(await temp.file('long.csv', content));
    expect(longNumbers).toEqual({ total: 5, rounded: 3 });
    expect(showsRounding(longNumbers)).toBe(true);
    expect(showsRounding({ total: 7, rounded: 3 })).toBe(false);
    expect(showsRounding({ total: 2, rounded: 2 })).toBe(false);
  });
});
