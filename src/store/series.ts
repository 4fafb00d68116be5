/**
 * An import's activity over time, for the dashboard's charts: rows settled
 * and 429s answered, summed per time bucket of the import's age, in one
 * Redis hash per import (`<prefix>:import:<id>:series`).
 *
 * Written inside the scripts that already settle rows and add API figures
 * (src/store/importStore.ts), so it costs no round trip of its own: a couple
 * of commands per settle call, not per row.
 *
 * Bounded: a bucket is 5 s for the import's first hour, 1 min until its first
 * day is over, 1 h after, and anything later than {@link SERIES_MAX_AGE_S}
 * lands in the last bucket: at most 720 + 1,380 + 720 buckets, two fields
 * each, however long an import lives. The hash expires with the import's
 * other keys.
 *
 * Fields: `<bucket start, s from the import's start>` = rows settled,
 * `<bucket start>:429` = 429 answers.
 */

/** Bucket widths by age: [age from which it applies (s), width (s)], youngest first. */
export const SERIES_TIERS: ReadonlyArray<readonly [number, number]> = [
  [0, 5],
  [3_600, 60],
  [86_400, 3_600],
];
/** Ages past this (31 days) are summed into its bucket. */
export const SERIES_MAX_AGE_S = 31 * 86_400;

/**
 * Lua: `stamp(series, record, now, rows, limited, createdAt)` adds to the
 * bucket of now; `createdAt` is the record's field when the caller read it
 * already (nil: read here). A series created after the import's keys were
 * set to expire takes their expiry, so a late figure never leaves a key
 * behind.
 */
export const STAMP_SERIES_LUA = `
local function stamp(series, record, now, rows, limited, createdAt)
  if rows == 0 and limited == 0 then return end
  if createdAt == nil then createdAt = redis.call('HGET', record, 'createdAt') end
  local created = tonumber(createdAt or now) or now
  local age = math.floor((now - created) / 1000)
  if age < 0 then age = 0 end
  if age > ${SERIES_MAX_AGE_S} then age = ${SERIES_MAX_AGE_S} end
  local width = ${SERIES_TIERS[0]?.[1] ?? 5}
  ${SERIES_TIERS.slice(1).map(([from, width]) => `if age >= ${from} then width = ${width} end`).join('\n  ')}
  local bucket = age - (age % width)
  local fresh = redis.call('EXISTS', series) == 0
  if rows > 0 then redis.call('HINCRBY', series, bucket, rows) end
  if limited > 0 then redis.call('HINCRBY', series, bucket .. ':429', limited) end
  if fresh then
    local ttl = redis.call('PTTL', record)
    if ttl > 0 then redis.call('PEXPIRE', series, ttl) end
  end
end`;

/** One bucket of the series. */
export interface SeriesPoint {
  /** Seconds from the import's start to the bucket's start. */
  at: number;
  /** The bucket's width in seconds. */
  width: number;
  rows: number;
  rateLimited: number;
}

/** The width of the bucket starting at `at` seconds. */
export function bucketWidth(at: number): number {
  let width = SERIES_TIERS[0]?.[1] ?? 5;
  for (const [from, w] of SERIES_TIERS) if (at >= from) width = w;
  return width;
}

/** The hash as points in time order (fields that are not the series' are ignored). */
export function seriesPoints(hash: Readonly<Record<string, string>>): SeriesPoint[] {
  const byAt = new Map<number, SeriesPoint>();
  for (const [field, value] of Object.entries(hash)) {
    const match = /^(\d+)(:429)?$/.exec(field);
    const n = Number(value);
    if (!match || !Number.isFinite(n)) continue;
    const at = Number(match[1]);
    let point = byAt.get(at);
    if (!point) byAt.set(at, (point = { at, width: bucketWidth(at), rows: 0, rateLimited: 0 }));
    if (match[2]) point.rateLimited += n;
    else point.rows += n;
  }
  return [...byAt.values()].sort((a, b) => a.at - b.at);
}
