/**
 * The csv-spectrum cases (the common CSV test suite), written here as bytes:
 * each reads to the records it holds, whatever else the reader now decides
 * from a file's start (encoding, delimiter, header line).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCsv } from '../../src/csv/reader.js';
import { collect, tempFolder } from './files.js';

let temp: Awaited<ReturnType<typeof tempFolder>>;
beforeAll(async () => {
  temp = await tempFolder();
});
afterAll(async () => {
  await temp.remove();
});

const CASES: ReadonlyArray<[string, string, string[][]]> = [
  ['comma_in_quotes', 'first,last,address,city,zip\r\nJohn,Doe,120 any st.,"Anytown, WW",08123\r\n', [['first', 'last', 'address', 'city', 'zip'], ['John', 'Doe', '120 any st.', 'Anytown, WW', '08123']]],
  ['empty', 'a,b,c\n1,"",""\n2,3,4\n', [['a', 'b', 'c'], ['1', '', ''], ['2', '3', '4']]],
  ['empty_crlf', 'a,b,c\r\n1,"",""\r\n2,3,4\r\n', [['a', 'b', 'c'], ['1', '', ''], ['2', '3', '4']]],
  ['escaped_quotes', 'a,b\n1,"ha ""ha"" ha"\n3,4\n', [['a', 'b'], ['1', 'ha "ha" ha'], ['3', '4']]],
  ['json', 'key,val\n1,"{""type"": ""Point"", ""coordinates"": [102.0, 0.5]}"\n', [['key', 'val'], ['1', '{"type": "Point", "coordinates": [102.0, 0.5]}']]],
  ['newlines', 'a,b,c\n1,2,3\n"Once upon \na time",5,6\n7,8,9\n', [['a', 'b', 'c'], ['1', '2', '3'], ['Once upon \na time', '5', '6'], ['7', '8', '9']]],
  ['newlines_crlf', 'a,b,c\r\n1,2,3\r\n"Once upon \r\na time",5,6\r\n7,8,9\r\n', [['a', 'b', 'c'], ['1', '2', '3'], ['Once upon \r\na time', '5', '6'], ['7', '8', '9']]],
  ['quotes_and_newlines', 'a,b\n1,"ha \n""ha"" \nha"\n3,4\n', [['a', 'b'], ['1', 'ha \n"ha" \nha'], ['3', '4']]],
  ['simple', 'a,b,c\n1,2,3\n', [['a', 'b', 'c'], ['1', '2', '3']]],
  ['simple_crlf', 'a,b,c\r\n1,2,3\r\n', [['a', 'b', 'c'], ['1', '2', '3']]],
  ['utf8', 'a,b,c\n1,2,3\n4,5,ʤ\n', [['a', 'b', 'c'], ['1', '2', '3'], ['4', '5', 'ʤ']]],
];

describe('csv-spectrum', () => {
  it.each(CASES)('%s', async (name, content, records) => {
    const csv = await openCsv(await temp.file(`${name}.csv`, content));
    const rows = await collect(csv.rows);
    expect([csv.headers, ...rows.map((row) => row.cells)]).toEqual(records);
  });
});
