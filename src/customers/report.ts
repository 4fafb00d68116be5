import { READ_TO_END_FIRST, type CustomerIndex } from './customerIndex.js';

/** The index as `index status --json` prints it. */
export interface IndexReport {
  present: boolean;
  customers?: number;
  totalItemCount?: number;
  builtAt?: string;
  currentAt?: string;
  /** Seconds since the index was last known to hold every customer; null when it is not (stale, or to be read to its end again). */
  ageSeconds?: number | null;
  /** Redis came back without some of its writes: the index's end is read again before a create relies on it (no full refresh needed). */
  readToEndFirst?: boolean;
  appendOnly?: boolean;
  fields?: string[];
  /** Redis the index takes, the IDs of its own creates not yet passed by its end included. */
  bytes?: number;
  /** Of `bytes`, the IDs of its own creates not yet passed by its end (at most about 11 MB; dropped as the end moves). */
  ownCreatesBytes?: number;
  /** Redis a customer takes in the index, without those IDs. */
  bytesPerCustomer?: number;
}

export async function indexReport(index: CustomerIndex, options: { memory?: boolean } = {}, now = Date.now()): Promise<IndexReport> {
  const meta = await index.meta();
  if (!meta) return { present: false };
  // MEMORY USAGE of every bucket: for `index status`, not for a page that polls.
  const memory = options.memory === false ? undefined : await index.memory();
  return {
    present: true,
    customers: meta.count,
    totalItemCount: meta.total,
    builtAt: new Date(meta.builtAt).toISOString(),
    currentAt: meta.refreshedAt > READ_TO_END_FIRST ? new Date(meta.refreshedAt).toISOString() : undefined,
    ageSeconds: meta.refreshedAt > READ_TO_END_FIRST ? Math.round((now - meta.refreshedAt) / 1000) : null,
    ...(meta.refreshedAt === READ_TO_END_FIRST ? { readToEndFirst: true } : {}),
    appendOnly: meta.appendOnly,
    fields: ['identity', ...meta.fields],
    bytes: memory?.bytes,
    ownCreatesBytes: memory?.ownCreatesBytes,
    bytesPerCustomer: memory && meta.count > 0 ? Math.round((memory.bytes - memory.ownCreatesBytes) / meta.count) : undefined,
  };
}

