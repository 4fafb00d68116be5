/**
 * Writes the export file while paging goes on, so that the end of an export
 * is not a second pass over every page: the pages of a full listing's first
 * round go into the file in page order as they arrive (a page that arrives
 * before the ones ahead of it waits here, or in the spool when it is too far
 * ahead), as long as their CustomerIDs ascend, which is what lets the file
 * skip de-duplication.
 *
 * It is only a head start. The listing's last page is never written here (its
 * round ends by reading it again), and at the end job.ts keeps what was
 * written only if every page of it is the read that paging settled on (same
 * spool record) and the listing ascends throughout; otherwise (drift, a
 * partitioned export, a resumed run) the file is written again from the
 * spool, as it would have been without this.
 */
import { compareIds } from '../customers/search.js';
import type { PageRead } from './pager.js';
import type { Spool, SpoolLocation } from './spool.js';
import type { ExportFileSink } from './writer.js';

/** Pages further ahead of the next one to write than this keep their rows in the spool only (memory stays flat). */
const WINDOW_PAGES = 64;

export interface InOrderWriter {
  /** A page was read (the pager's `onRead`). */
  offer(read: PageRead): void;
  /** Waits for the write in progress; then says which pages are in the file, in order, or undefined when it gave up. */
  settle(): Promise<WrittenPrefix | undefined>;
}

export interface WrittenPrefix {
  /** Pages 0..n-1 of listing 0, by the spool record written. */
  pages: SpoolLocation[];
}

interface Waiting {
  loc: SpoolLocation;
  body: Buffer | undefined;
  n: number;
  first: string | null;
  last: string | null;
  asc: boolean;
}

export function createInOrderWriter(input: { sink: ExportFileSink; spool: Spool; pageSize: number }): InOrderWriter {
  const { sink, spool, pageSize } = input;
  const waiting = new Map<number, Waiting>();
  const written: SpoolLocation[] = [];
  let next = 0;
  /** Pages from here on are not written here: the last page at the smallest count seen. */
  let limit = Number.POSITIVE_INFINITY;
  let lastId: string | null = null;
  let gaveUp = false;
  let pumping: Promise<void> | undefined;

  async function pump(): Promise<void> {
    try {
      for (;;) {
        const page = waiting.get(next);
        if (gaveUp || !page || next >= limit) return;
        if (!page.asc || (lastId !== null && page.first !== null && compareIds(lastId, page.first) >= 0)) {
          gaveUp = true;
          return;
        }
        const body = page.body ?? (await spool.readBody(0, next, page.loc));
        await sink.write(body, page.n);
        waiting.delete(next);
        written.push(page.loc);
        if (page.last !== null) lastId = page.last;
        next++;
      }
    } catch {
      // The file is written again from the spool at the end, where a real failure shows.
      gaveUp = true;
    }
  }

  function kick(): void {
    if (pumping || gaveUp || !waiting.has(next) || next >= limit) return;
    pumping = pump().finally(() => {
      pumping = undefined;
      // A page that arrived as the pump was finishing.
      kick();
    });
  }

  return {
    offer({ listing, contains, page, round, meta, body }) {
      if (gaveUp || listing !== 0 || contains !== '' || round !== 1) return;
      limit = Math.min(limit, Math.max(0, Math.ceil(meta.t / pageSize) - 1));
      if (page < next || page >= limit) return;
      const loc = { f: meta.f, o: meta.o, b: meta.b };
      waiting.set(page, { loc, body: page - next < WINDOW_PAGES ? body : undefined, n: meta.n, first: meta.first, last: meta.last, asc: meta.asc });
      kick();
    },
    async settle() {
      while (pumping) await pumping;
      return gaveUp ? undefined : { pages: written };
    },
  };
}
