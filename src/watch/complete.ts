/**
 * Whether an inbox file ends with a whole CSV record, read once at disk
 * speed, with the sha256 of the bytes read (what is compared later to tell a
 * file that changed after it was taken).
 *
 * A file is complete when it is not empty, does not end inside a quoted cell,
 * and either ends with a line end or its last record has at least as many
 * cells as the header. That last rule catches a copy cut in the middle of a
 * record's early cells; a cut inside the last unquoted cell cannot be told
 * from a whole record, which is what the settle time is for. Quote, comma and
 * line-end bytes never occur inside a multi-byte UTF-8 sequence, so bytes are
 * read as they come.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';

const QUOTE = 0x22;
const COMMA = 0x2c;
const LF = 0x0a;
const CR = 0x0d;

export interface FileInspection {
  /** Bytes read. */
  size: number;
  /** sha256 of those bytes, hex. */
  sha256: string;
  /** It ends with a whole record (see the module comment). */
  complete: boolean;
  /** Why not, for the log, when not complete. */
  incomplete?: 'empty' | 'inside a quoted cell' | 'inside a record';
}

export async function inspectFile(file: string): Promise<FileInspection> {
  const hash = createHash('sha256');
  let size = 0;
  let inQuotes = false;
  /** Commas outside quotes in the record being read. */
  let separators = 0;
  let headerCells: number | undefined;
  let last = -1;
  for await (const read of createReadStream(file)) {
    const chunk = read as Buffer;
    hash.update(chunk);
    size += chunk.length;
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i];
      // A doubled quote inside a quoted cell toggles twice: still inside.
      if (byte === QUOTE) inQuotes = !inQuotes;
      else if (inQuotes) continue;
      else if (byte === COMMA) separators++;
      else if (byte === LF || byte === CR) {
        // A blank line (or the LF of a CRLF) has no cells: only a record with content sets the header's count.
        if (headerCells === undefined && (separators > 0 || (last !== LF && last !== CR && last !== -1))) headerCells = separators + 1;
        separators = 0;
      }
      last = byte ?? last;
    }
  }
  const sha256 = hash.digest('hex');
  if (size === 0) return { size, sha256, complete: false, incomplete: 'empty' };
  if (inQuotes) return { size, sha256, complete: false, incomplete: 'inside a quoted cell' };
  if (last === LF || last === CR || headerCells === undefined || separators + 1 >= headerCells) return { size, sha256, complete: true };
  return { size, sha256, complete: false, incomplete: 'inside a record' };
}
