/**
 * Helpers for tests of a fleet of `subsync worker` processes: which process
 * settled which row (from its debug log), how many requests fell into one
 * sliding second, and the Redis Cluster hash slot of a key.
 */
import { z } from 'zod';

/** The debug line a row worker writes once it has settled a row (src/workers/rowWorker.ts). */
const RowSettledLineSchema = z.object({ msg: z.literal('row settled'), pid: z.number().int(), importId: z.string(), row: z.number().int(), status: z.string() });
export type RowSettledLine = z.infer<typeof RowSettledLineSchema>;

/** Every 'row settled' line in one process's JSON log (other lines are skipped). */
export function rowsSettled(logText: string): RowSettledLine[] {
  const settled: RowSettledLine[] = [];
  for (const line of logText.split('\n')) {
    if (!line.includes('"row settled"')) continue;
    settled.push(RowSettledLineSchema.parse(JSON.parse(line)));
  }
  return settled;
}

/**
 * The most timestamps found in any sliding window of `windowMs`, with the
 * sandbox limiter's semantics (src/sandbox/faults.ts): a window ending at a
 * request holds every request in (t - windowMs, t].
 */
export function maxInSlidingWindow(times: readonly number[], windowMs = 1000): number {
  const sorted = [...times].sort((a, b) => a - b);
  let max = 0;
  let first = 0;
  for (let last = 0; last < sorted.length; last++) {
    while ((sorted[first] ?? 0) <= (sorted[last] ?? 0) - windowMs) first++;
    max = Math.max(max, last - first + 1);
  }
  return max;
}

/** CRC16-CCITT (XModem), the checksum Redis Cluster hashes keys with. */
export function crc16(input: string): number {
  let crc = 0;
  for (const byte of Buffer.from(input, 'utf8')) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/**
 * The Redis Cluster slot of a key: CRC16 of its hash tag (the text between
 * the first `{` and the first `}` after it, when not empty), else of the whole
 * key, modulo 16384.
 */
export function hashSlot(key: string): number {
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) return crc16(key.slice(open + 1, close)) % 16384;
  }
  return crc16(key) % 16384;
}
