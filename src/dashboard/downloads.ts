import { createReadStream } from 'node:fs';
import { Transform, type Readable } from 'node:stream';
import { parse } from 'csv-parse';
import { stringify } from 'csv-stringify';
import { escapeFormula } from '../results/formula.js';

/**
 * A results file made safe to open in a spreadsheet:
 * every cell quoted and passed through `escapeFormula`. The files on disk
 * stay as written (they are meant to be imported again); only what the
 * dashboard hands a person is escaped. Streamed: memory stays flat however
 * large the file.
 */
export function escapedCsv(file: string): Readable {
  const source = createReadStream(file);
  const parser = parse({ relax_column_count: true, bom: true });
  const escape = new Transform({
    objectMode: true,
    transform(record: unknown, _encoding, done) {
      done(null, Array.isArray(record) ? record.map((cell) => escapeFormula(String(cell))) : record);
    },
  });
  const out = stringify({ quoted: true, quoted_empty: true, record_delimiter: 'unix', escape_formulas: false });
  // Errors anywhere end the response stream too, rather than leaving it hanging.
  for (const stage of [source, parser, escape]) stage.on('error', (error: Error) => out.destroy(error));
  return source.pipe(parser).pipe(escape).pipe(out);
}
