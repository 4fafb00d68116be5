/**
 * An export's progress in Redis, under the configured prefix, so that a run
 * killed half-way is resumed by the next run of its job (on any worker) from
 * the pages it had finished, and so that `export --wait` and the dashboard can
 * follow it:
 *
 * - `<prefix>:export:<id>` hash: the record (request, file name, status,
 *   phase, counters: pagesDone/pagesPlanned, rows, requests, retries, ...);
 * - `<prefix>:export:<id>:listings` hash: listing number -> its state (JSON);
 * - `<prefix>:export:<id>:pages` hash: `<listing>:<page>` -> what that page
 *   held when it was read (JSON: count, TotalItemCount seen, first and last
 *   CustomerID; the IDs themselves are in the spool);
 * - `<prefix>:export:<id>:warnings` hash: code -> text, each said once;
 * - `<prefix>:exports` sorted set: export ids by start time.
 *
 * The pages' records themselves are on disk (spool.ts). When the export is
 * done, the listings and pages are deleted and the record expires after
 * EXPORT_DEFAULTS.recordTtlSeconds.
 */
import { createHash } from 'node:crypto';
import type { RedisClient } from '../redis/redis.js';
import { z } from 'zod';
import { EXPORT_DEFAULTS } from '../policy.js';
import { EXPORT_FORMATS } from './request.js';

export function exportKeys(prefix: string) {
  return {
    index: `${prefix}:exports`,
    record: (id: string) => `${prefix}:export:${id}`,
    listings: (id: string) => `${prefix}:export:${id}:listings`,
    pages: (id: string) => `${prefix}:export:${id}:pages`,
    warnings: (id: string) => `${prefix}:export:${id}:warnings`,
    /** Which export took a file name (hashed folder and base), so two starting in the same second never share one. */
    name: (claim: string) => `${prefix}:export-name:${createHash('sha256').update(claim).digest('hex').slice(0, 32)}`,
  };
}

export const EXPORT_STATUSES = ['running', 'retrying', 'done', 'failed'] as const;
export type ExportStatus = (typeof EXPORT_STATUSES)[number];
/** paging: reading pages; writing: assembling the file; done. */
export const EXPORT_PHASES = ['paging', 'writing', 'done'] as const;
export type ExportPhase = (typeof EXPORT_PHASES)[number];
/** full: one listing with an empty `contains`; partitioned: one listing per character (the service refused an empty search). */
export type ExportMode = 'full' | 'partitioned';

const count = z.coerce.number().int().min(0).default(0);
const flag = z.enum(['0', '1']).transform((v) => v === '1');
const optionalNumber = z.coerce.number().optional();

const ExportRecordSchema = z.object({
  id: z.string(),
  jobId: z.string(),
  format: z.enum(EXPORT_FORMATS),
  gzip: flag,
  outDir: z.string(),
  keep: optionalNumber,
  /** The file's name without extension, `customers-<UTC stamp>`, decided at the first run. */
  base: z.string(),
  startedAt: z.coerce.number(),
  status: z.enum(EXPORT_STATUSES),
  phase: z.enum(EXPORT_PHASES),
  mode: z.enum(['full', 'partitioned']),
  /** Page reads finished, and planned so far (re-read rounds and probes add to both). */
  pagesDone: count,
  pagesPlanned: count,
  /** Records received (re-reads included). */
  rows: count,
  /** Search requests sent, retries of transient failures, 429 answers. */
  requests: count,
  retries: count,
  rateLimited: count,
  /** Runs of the job so far; and pages found finished when the latest run began. */
  runs: count,
  resumedPages: count,
  // Set when done:
  file: z.string().optional(),
  manifest: z.string().optional(),
  count: optionalNumber,
  complete: flag.optional(),
  finishedAt: optionalNumber,
  /** The last failure, when a run failed. */
  error: z.string().optional(),
});
export type ExportRecord = z.infer<typeof ExportRecordSchema>;

/** One listing's progress through its rounds (pager.ts). */
export const ListingStateSchema = z.object({
  contains: z.string(),
  /** TotalItemCount of its first page; undefined until that page is read. */
  totalAtStart: z.number().int().min(0).optional(),
  /** TotalItemCount of the latest probe (or of the first page, before any probe). */
  latest: z.number().int().min(0).optional(),
  round: z.number().int().min(1),
  /** The pages this round reads; a page is finished for the round when its stored read is of this round. */
  plan: z.array(z.number().int().min(0)),
  /** This round's probe has been read. */
  probed: z.boolean(),
  done: z.boolean(),
  /** Every page read agrees with the final TotalItemCount, or (startProven) every customer present at the start was read once (set when done). */
  complete: z.boolean(),
  /** Complete by `coversStart` (pager.ts): the count still grew at the end when rounds ran out; the pages past the start count are what was met. */
  startProven: z.boolean().optional(),
  /** Pages read again after the first round, in order of rounds. */
  reread: z.array(z.number().int().min(0)),
  /** Why each extra round was needed. */
  reasons: z.array(z.string()),
});
export type ListingState = z.infer<typeof ListingStateSchema>;

/** What one page held when it was last read. */
export const PageMetaSchema = z.object({
  /** Records returned. */
  n: z.number().int().min(0),
  /** The TotalItemCount of that answer. */
  t: z.number().int().min(0),
  /** The round that read it. */
  r: z.number().int().min(1),
  /** Order of finishing among all page reads of the export. */
  s: z.number().int().min(0),
  /** The first and last CustomerID as returned (null on an empty page): enough to see whether pages follow each other in ID order. */
  first: z.string().nullable(),
  last: z.string().nullable(),
  /** The page's CustomerIDs strictly ascend. */
  asc: z.boolean(),
  /** Where its record is in the spool: segment, offset, bytes (spool.ts). Absent: recorded by an older version, read again. */
  f: z.string().optional(),
  o: z.number().int().min(0).optional(),
  b: z.number().int().min(0).optional(),
});
export type PageMeta = z.infer<typeof PageMetaSchema>;

export const pageKey = (listing: number, page: number): string => `${listing}:${page}`;

/** Counters of the record that grow during a run. */
export type ExportCounter = 'requests' | 'retries' | 'rateLimited';

export interface ExportStore {
  readonly keys: ReturnType<typeof exportKeys>;
  /** Claims a file name (folder and base) for an export; false when another export has it. */
  claimName(claim: string, id: string): Promise<boolean>;
  /** Creates the record unless it exists (a resumed run keeps the first run's file name and start), and returns it. */
  open(init: Pick<ExportRecord, 'id' | 'jobId' | 'format' | 'gzip' | 'outDir' | 'keep' | 'base' | 'startedAt'>): Promise<ExportRecord>;
  get(id: string): Promise<ExportRecord | undefined>;
  update(id: string, fields: Partial<Record<keyof ExportRecord, string | number | boolean | undefined>>): Promise<void>;
  increment(id: string, counter: ExportCounter, by?: number): Promise<void>;
  /** Says `text` once under `code`; a resumed run saying it again changes nothing. */
  warn(id: string, code: string, text: string): Promise<void>;
  warnings(id: string): Promise<string[]>;
  listings(id: string): Promise<Map<number, ListingState>>;
  /** Saves a listing's state; `planned` page reads are added to the progress in the same transaction. */
  saveListing(id: string, listing: number, state: ListingState, planned?: number): Promise<void>;
  /**
   * Records finished page reads in one transaction: their metas (each with the
   * next finishing order) and the progress counters, `requests` (the search
   * requests they took) included.
   */
  savePages(id: string, pages: ReadonlyArray<{ listing: number; page: number; meta: Omit<PageMeta, 's'> }>, requests: number): Promise<PageMeta[]>;
  /** The stored pages of one listing, by page index. */
  pages(id: string, listing: number): Promise<Map<number, PageMeta>>;
  /** Forgets pages (their spool files went missing): they are read again. */
  forgetPages(id: string, keys: readonly string[]): Promise<void>;
  /** Marks the export done: outcome fields set, working state removed, the record left to expire. */
  finish(id: string, fields: Partial<Record<keyof ExportRecord, string | number | boolean | undefined>>): Promise<void>;
  /** The newest exports first. */
  recent(limit: number): Promise<ExportRecord[]>;
}

function toHash(fields: Partial<Record<string, string | number | boolean | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined) continue;
    out[key] = typeof value === 'boolean' ? (value ? '1' : '0') : String(value);
  }
  return out;
}

export function createExportStore(redis: RedisClient, prefix: string): ExportStore {
  const keys = exportKeys(prefix);
  const ttl = EXPORT_DEFAULTS.recordTtlSeconds;

  async function get(id: string): Promise<ExportRecord | undefined> {
    const hash = await redis.hgetall(keys.record(id));
    if (Object.keys(hash).length === 0) return undefined;
    const parsed = ExportRecordSchema.safeParse(hash);
    if (!parsed.success) throw new Error(`export ${id}: its record in Redis is not readable (${parsed.error.issues[0]?.message ?? 'bad'})`);
    return parsed.data;
  }

  return {
    keys,
    async claimName(claim, id) {
      const set = await redis.set(keys.name(claim), id, 'EX', ttl, 'NX');
      return set === 'OK' || (await redis.get(keys.name(claim))) === id;
    },
    async open(init) {
      const fields = toHash({ ...init, status: 'running', phase: 'paging', mode: 'full' });
      const multi = redis.multi();
      // HSETNX field by field in one transaction: a run that resumes keeps every
      // value the first run set (its file name above all).
      for (const [field, value] of Object.entries(fields)) multi.hsetnx(keys.record(init.id), field, value);
      multi.zadd(keys.index, 'NX', init.startedAt, init.id);
      multi.zremrangebyrank(keys.index, 0, -EXPORT_DEFAULTS.recordsListed - 1);
      await multi.exec();
      const record = await get(init.id);
      if (!record) throw new Error(`export ${init.id}: its record vanished as it was created`);
      return record;
    },
    get,
    async update(id, fields) {
      await redis.hset(keys.record(id), toHash(fields));
    },
    async increment(id, counter, by = 1) {
      await redis.hincrby(keys.record(id), counter, by);
    },
    async warn(id, code, text) {
      await redis.hsetnx(keys.warnings(id), code, text);
    },
    async warnings(id) {
      return Object.values(await redis.hgetall(keys.warnings(id)));
    },
    async listings(id) {
      const hash = await redis.hgetall(keys.listings(id));
      return new Map(Object.entries(hash).map(([field, json]) => [Number(field), ListingStateSchema.parse(JSON.parse(json))]));
    },
    async saveListing(id, listing, state, planned = 0) {
      const multi = redis.multi().hset(keys.listings(id), String(listing), JSON.stringify(state));
      if (planned > 0) multi.hincrby(keys.record(id), 'pagesPlanned', planned);
      await multi.exec();
    },
    async savePages(id, pages, requests) {
      if (pages.length === 0) {
        if (requests > 0) await redis.hincrby(keys.record(id), 'requests', requests);
        return [];
      }
      const last = await redis.hincrby(keys.record(id), 'seq', pages.length);
      const stored = pages.map(({ meta }, i): PageMeta => ({ ...meta, s: last - pages.length + 1 + i }));
      const fields: Record<string, string> = {};
      let rows = 0;
      pages.forEach(({ listing, page }, i) => {
        fields[pageKey(listing, page)] = JSON.stringify(stored[i]);
        rows += stored[i]?.n ?? 0;
      });
      const multi = redis.multi().hset(keys.pages(id), fields).hincrby(keys.record(id), 'pagesDone', pages.length).hincrby(keys.record(id), 'rows', rows);
      if (requests > 0) multi.hincrby(keys.record(id), 'requests', requests);
      await multi.exec();
      return stored;
    },
    async pages(id, listing) {
      const hash = await redis.hgetall(keys.pages(id));
      const out = new Map<number, PageMeta>();
      for (const [field, json] of Object.entries(hash)) {
        const [l, p] = field.split(':').map(Number);
        if (l === listing && p !== undefined) out.set(p, PageMetaSchema.parse(JSON.parse(json)));
      }
      return out;
    },
    async forgetPages(id, pageKeys) {
      if (pageKeys.length > 0) await redis.hdel(keys.pages(id), ...pageKeys);
    },
    async finish(id, fields) {
      await redis
        .multi()
        .hset(keys.record(id), toHash({ ...fields, status: 'done', phase: 'done' }))
        .hdel(keys.record(id), 'error')
        .del(keys.listings(id), keys.pages(id))
        .expire(keys.record(id), ttl)
        .expire(keys.warnings(id), ttl)
        .exec();
    },
    async recent(limit) {
      const ids = await redis.zrevrange(keys.index, 0, limit - 1);
      const records = await Promise.all(ids.map((id) => get(id)));
      return records.filter((r): r is ExportRecord => r !== undefined);
    },
  };
}
