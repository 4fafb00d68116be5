import type { ApiClient } from '../api/client.js';
import { MarkInDoubtError } from '../store/rollback.js';

// Rows' ledger writes are gathered so; the guard's claims too, a layer below (hence its place).
export { coalesce, GATHER_MS, SETTLE_GATHER_MS } from '../redis/coalesce.js';

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
  private readonly queue: Array<{ go: () => void; near: (() => void) | undefined }> = [];
  readonly lookahead: number;

  constructor(readonly size: number, lookahead = Math.ceil(size / 4)) {
    this.free = size;
    this.lookahead = lookahead;
  }

  /** Takers waiting for a slot now. */
  get waiting(): number {
    return this.queue.length;
  }

  async take(whenNear?: () => void): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return;
    }
    await new Promise<void>((go) => {
      this.queue.push({ go, near: whenNear });
      if (this.queue.length <= this.lookahead) this.tellNear(this.queue.length - 1);
    });
  }

  give(): void {
    const next = this.queue.shift();
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
    const waiter = this.queue[index];
    if (!waiter?.near) return;
    const near = waiter.near;
    waiter.near = undefined;
    near();
  }
}

/**
 * The API client with every call in one of `slots`: a row holds a slot only
 * while its request is out (the budget's wait, the request, its answer read),
 * never for the ledger's or the guard's Redis round trips around it. Made
 * once per process.
 */
/** `markEpoch`: the rollback watch's epoch (src/store/rollback.ts); a create that waited across a change of it does not leave. */
export function slottedApi(api: ApiClient, slots: Slots, markEpoch?: () => number): ApiClient {
  return new SlottedApi(api, slots, markEpoch);
}

class SlottedApi implements ApiClient {
  constructor(
    private readonly api: ApiClient,
    private readonly slots: Slots,
    private readonly markEpoch?: () => number,
  ) {}

  /** Takes a slot for a create whose row was just marked sent: refused when Redis was lost meanwhile (its mark may be gone). */
  private async takeForCreate(): Promise<void> {
    const at = this.markEpoch?.();
    await this.slots.take();
    if (at !== undefined && this.markEpoch?.() !== at) {
      this.slots.give();
      throw new MarkInDoubtError();
    }
  }

  async searchCustomers(...args: Parameters<ApiClient['searchCustomers']>): ReturnType<ApiClient['searchCustomers']> {
    await this.slots.take();
    try {
      return await this.api.searchCustomers(...args);
    } finally {
      this.slots.give();
    }
  }
  async getCustomer(...args: Parameters<ApiClient['getCustomer']>): ReturnType<ApiClient['getCustomer']> {
    await this.slots.take();
    try {
      return await this.api.getCustomer(...args);
    } finally {
      this.slots.give();
    }
  }
  async createCustomer(...args: Parameters<ApiClient['createCustomer']>): ReturnType<ApiClient['createCustomer']> {
    await this.takeForCreate();
    try {
      return await this.api.createCustomer(...args);
    } finally {
      this.slots.give();
    }
  }
  async updateCustomer(...args: Parameters<ApiClient['updateCustomer']>): ReturnType<ApiClient['updateCustomer']> {
    await this.slots.take();
    try {
      return await this.api.updateCustomer(...args);
    } finally {
      this.slots.give();
    }
  }
  async getOffer(...args: Parameters<ApiClient['getOffer']>): ReturnType<ApiClient['getOffer']> {
    await this.slots.take();
    try {
      return await this.api.getOffer(...args);
    } finally {
      this.slots.give();
    }
  }
  async signUp(...args: Parameters<ApiClient['signUp']>): ReturnType<ApiClient['signUp']> {
    await this.takeForCreate();
    try {
      return await this.api.signUp(...args);
    } finally {
      this.slots.give();
    }
  }
  async updatePaymentMethod(...args: Parameters<ApiClient['updatePaymentMethod']>): ReturnType<ApiClient['updatePaymentMethod']> {
    await this.slots.take();
    try {
      return await this.api.updatePaymentMethod(...args);
    } finally {
      this.slots.give();
    }
  }
  close(): Promise<void> {
    return this.api.close();
  }
}
