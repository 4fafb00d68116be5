/**
 * Gathers the calls made during one turn of the event loop into one call of
 * `flush` per key. The row worker's ledger writes go through it: rows that
 * finish together (their answers read in the same turn) settle in one Redis
 * script call instead of one each.
 *
 * `flush(key, items)` answers one result per item, in order; a failed flush
 * fails every call it gathered.
 */
export function coalesce<T, R>(flush: (key: string, items: T[]) => Promise<R[]>): (key: string, item: T) => Promise<R> {
  let pending = new Map<string, Array<{ item: T; resolve: (result: R) => void; reject: (error: unknown) => void }>>();
  let scheduled = false;

  const run = (): void => {
    const groups = pending;
    pending = new Map();
    scheduled = false;
    for (const [key, calls] of groups) {
      flush(
        key,
        calls.map((c) => c.item),
      ).then(
        (results) => {
          if (results.length !== calls.length) throw new Error(`coalesced flush answered ${results.length} results for ${calls.length} calls`);
          calls.forEach((c, i) => c.resolve(results[i] as R));
        },
        (error: unknown) => calls.forEach((c) => c.reject(error)),
      ).catch((error: unknown) => calls.forEach((c) => c.reject(error)));
    }
  };

  return (key, item) =>
    new Promise<R>((resolve, reject) => {
      let calls = pending.get(key);
      if (!calls) pending.set(key, (calls = []));
      calls.push({ item, resolve, reject });
      if (!scheduled) {
        scheduled = true;
        setImmediate(run);
      }
    });
}

/**
 * A count of slots taken in turn (first come, first served): the row worker
 * holds one per row while its requests are out, so however many jobs are
 * active, at most `size` rows of a process talk to the API at once.
 */
export class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly size: number) {
    this.free = size;
  }

  async take(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  give(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
  }

  /** Runs `work` in a slot. */
  async run<T>(work: () => Promise<T>): Promise<T> {
    await this.take();
    try {
      return await work();
    } finally {
      this.give();
    }
  }
}
