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
 *
 * A waiter may ask to be told when it is among the next `lookahead` in line
 * (`whenNear`), so it can get ready while the slot it will take is still
 * busy: a create marks itself `sent` then, and its request leaves as soon as
 * the slot is free instead of one Redis round trip later.
 */
export class Slots {
  private free: number;
  private readonly waiting: Array<{ go: () => void; near: (() => void) | undefined }> = [];
  readonly lookahead: number;

  constructor(readonly size: number, lookahead = Math.ceil(size / 4)) {
    this.free = size;
    this.lookahead = lookahead;
  }

  async take(whenNear?: () => void): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((go) => {
      this.waiting.push({ go, near: whenNear });
      if (this.waiting.length <= this.lookahead) this.tellNear(this.waiting.length - 1);
    });
  }

  give(): void {
    const next = this.waiting.shift();
    if (!next) {
      this.free++;
      return;
    }
    this.tellNear(this.lookahead - 1);
    next.go();
  }

  /** Runs `work` in a slot; `whenNear` as for take. */
  async run<T>(work: () => Promise<T>, whenNear?: () => void): Promise<T> {
    await this.take(whenNear);
    try {
      return await work();
    } finally {
      this.give();
    }
  }

  private tellNear(index: number): void {
    const waiter = this.waiting[index];
    if (!waiter?.near) return;
    const near = waiter.near;
    waiter.near = undefined;
    near();
  }
}
