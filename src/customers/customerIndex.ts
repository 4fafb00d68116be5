/**
 * What subsync knows of the service's customers, kept in Redis under the
 * queue prefix: keys (see identity.ts) → CustomerIDs.
 *
 * It is an accelerator, never the source of truth: a key it holds says "at
 * the time of the index, this customer carried this key", and a key it lacks
 * says "no customer carried it" only while the index is current (meta
 * `refreshedAt`, kept current by a delta read of the service's newest
 * customers: refresh.ts). A stale or missing index costs requests (a search,
 * a read), never a duplicate.
 *
 * Layout, for at most 64 bytes of Redis per customer at a million:
 * - `<prefix>:cix` (hash): the meta below, and `nextGen`;
 * - `<prefix>:cix:<gen>:<kind>:<bucket>` (hashes): the 8-byte digest of a key
 *   → its CustomerIDs, comma-separated. `kind` is `i` (identity) or a field
 *   name. Buckets are sized for about 50 entries each, so each stays a small
 *   listpack in Redis (a few bytes of overhead an entry, where one key per
 *   customer would cost about 70);
 * - a full refresh writes a new generation and switches to it at the end, so
 *   readers never see a half-built index; the one it replaced is deleted at
 *   the following switch (a reader may still hold its meta for a moment).
 * - `<prefix>:cix:claims` (hash): identity digest → `importId:row` of a row
 *   whose create is under way, so two imports of one person never both send
 *   (see claimDigest). It also holds one field that is no claim,
 *   {@link CLAIMS_PIN_FIELD}, which keeps it a hashtable (see there).
 * - `<prefix>:cix:written:<token>` (string, expiring): how many customers one
 *   delta or full build has written so far, counted by the same script calls
 *   that write them. A Redis that lost acknowledged writes (a host crash, a
 *   failover to a replica behind) comes back from a point of its write stream:
 *   the count it kept is then short of what the process wrote, and the
 *   index's end is not moved, nor the build switched in, over customers it
 *   no longer holds (a read-back would find nothing, and create again).
 */
import { randomBytes } from 'node:crypto';
import type { RedisClient } from '../redis/redis.js';
import { luaScript } from '../redis/script.js';
import type { Customer } from '../api/schemas/index.js';
import { digestOf, fieldKey, freshDigestOf, identityKey } from './identity.js';
import { sortableId } from './search.js';
import { coalesce } from '../redis/coalesce.js';
import { SubsyncError } from '../errors.js';

/** What kind of key an index lookup is for: `i`dentity, or a field's value. */
export type KeyKind = 'i' | string;

/** How long a process keeps the index's meta before reading it again. */
const META_CACHE_MS = 250;
/** Average entries per bucket the index is sized for: well under Redis's 128-entry listpack limit for hashes. */
const ENTRIES_PER_BUCKET = 50;
/** Room left for the customers created after a full build, before the next one resizes. */
const GROWTH_ROOM = 1.25;
/** Customers written to the index per script call. */
const WRITE_CHUNK = 500;
/** Fields indexed beside the identity unless an import asks for more. */
export const DEFAULT_INDEXED_FIELDS: readonly string[] = ['EmailAddress'];

export interface IndexMeta {
  gen: number;
  buckets: number;
  /** Fields indexed beside the identity. */
  fields: string[];
  /** When the full listing that built this generation began (ms). */
  builtAt: number;
  /**
   * The last time the index was known to hold every customer of the service
   * (ms). 0: stale, only a full refresh makes it current again;
   * READ_TO_END_FIRST: Redis lost writes since, and its end is read again
   * before a create relies on it (see `distrust`).
   */
  refreshedAt: number;
  /** TotalItemCount of the full listing when the index was last made current. */
  total: number;
  /** The CustomerID last in the listing then: a delta read starts by checking it is still there. */
  lastId: string;
  /** Customers indexed. */
  count: number;
  /**
   * The listing was seen in ascending CustomerID order, so new customers come
   * at its end and a delta read from `total - 1` finds them all. Without it
   * only a full refresh makes the index current.
   */
  appendOnly: boolean;
  /** Full refreshes and deltas run, for `index status`. */
  deltas: number;
  /**
   * Changed each time Redis is found to have lost writes (`distrust`): a
   * delta begun under another one read the listing before that, and cannot
   * make the index current. (A build is switched in to be read to its end
   * anyway.)
   */
  trust: string;
}

/**
 * `refreshedAt` of an index that Redis came back without some writes of:
 * older than any index may be, so the next create reads its delta first.
 */
export const READ_TO_END_FIRST = 1;

/**
 * The writes of one delta or full build: counted in Redis as they land
 * (`key`), and here (`written`), so that the end of a delta moves, and a
 * build is switched in, only while Redis holds every one of them.
 */
export interface IndexWrites {
  key: string;
  written: number;
}

/** A generation a full refresh is about to list the customers for, its buckets not counted yet. */
export interface OpenBuild {
  gen: number;
  fields: string[];
}

/** A generation being written by a full refresh; switched in by `commit`. */
export interface IndexBuild extends IndexWrites, OpenBuild {
  buckets: number;
}

/** Thrown by `commit` when Redis no longer holds every customer the build wrote: the build is not switched in. */
export class IndexWritesLostError extends SubsyncError {
  readonly code = 'INDEX_WRITES_LOST';
  constructor(written: number, kept: number) {
    super(`Redis came back without some of the customer index's writes (${kept} of ${written} customers kept): the new index is not switched in, and the next refresh builds it again`);
  }
}

/** How long the count of a delta's or build's writes is kept when nothing ends it (its process died). */
const WRITES_KEPT_MS = 24 * 3_600_000;

/**
 * The most of its own creates past its end a generation keeps (about 110
 * bytes each in Redis): past that, a delta reads every page, as it would
 * without them. Deltas every 15-30 s while imports run keep far fewer.
 */
const OWN_CREATES_KEPT_MAX = 100_000;

// Lua: adds a CustomerID to a key's comma-separated list in its bucket, unless it is there. A key
// new to the index (every create's, nearly every build's) is one HSETNX, not a read and a write.
const ADD_ID_LUA = `
local function addId(bucket, field, id)
  if redis.call('HSETNX', bucket, field, id) == 1 then return end
  local current = redis.call('HGET', bucket, field)
  if not string.find(',' .. current .. ',', ',' .. id .. ',', 1, true) then
    redis.call('HSET', bucket, field, current .. ',' .. id)
  end
end`;

// KEYS: one bucket per entry. ARGV: (digest, CustomerID) per KEYS entry.
// Adds the CustomerID to the key's list unless it is there.
const ADD_SCRIPT = `${ADD_ID_LUA}
for i = 1, #KEYS do
  local field, id = ARGV[2 * i - 1], ARGV[2 * i]
  addId(KEYS[i], field, id)
end
return #KEYS
`;

// Lua: what Redis kept of a delta's or build's count of writes (IndexWrites), the count taken away.
const WRITES_KEPT_LUA = `
local function writesKept(key)
  local kept = tonumber(redis.call('GET', key) or '0')
  redis.call('DEL', key)
  return kept
end`;

// As ADD_SCRIPT, for a delta or a build: the customers written are counted in the same call.
// KEYS: the count (IndexWrites), then one bucket per entry. ARGV: customers written, the count's expiry (ms),
// then (digest, CustomerID) per bucket.
const ADD_COUNTED_SCRIPT = `${ADD_ID_LUA}
for i = 2, #KEYS do
  addId(KEYS[i], ARGV[2 * i - 1], ARGV[2 * i])
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return #KEYS - 1
`;

// Lua: takes a CustomerID off a key's list in its bucket.
const REMOVE_ID_LUA = `
local function removeId(bucket, field, id)
  local current = redis.call('HGET', bucket, field)
  if not current then return end
  local kept = {}
  for each in string.gmatch(current, '[^,]+') do
    if each ~= id then kept[#kept + 1] = each end
  end
  if #kept == 0 then redis.call('HDEL', bucket, field) else redis.call('HSET', bucket, field, table.concat(kept, ',')) end
end`;

// Lua: the builds under way: their generations, ascending, comma-separated.
const OPEN_BUILDS_LUA = `
local function openBuilds(key)
  local gens = redis.call('HKEYS', key)
  table.sort(gens, function(a, b) return tonumber(a) < tonumber(b) end)
  return table.concat(gens, ',')
end`;

// Moves a customer's keys after an update, in the generation readers use now (as CREATED_SCRIPT, and for
// the same reason), and, while builds list the customers, keeps the same move for them: a build may have read
// the customer before the update, and writes its old keys. Each build applies what was kept from its opening
// on when it is switched in (COMMIT_SCRIPT), after all its own writes.
// KEYS: meta, the builds under way, the moves kept for them (one list), then the current generation's buckets
// of the keys taken off (R of them), then of those added. ARGV: the current generation ('' for none), the
// builds' (as openBuilds gives them, '' for none), R, then (digest, CustomerID) per bucket, then the moves:
// (op, kind, digest, CustomerID) each, op '-' or '+', the kinds of every build (a build's buckets are counted
// once its listing's first page is read: the commit finds each key's). Returns -1 when the current
// generation or the builds are not those the caller saw (nothing written).
const REPLACE_SCRIPT = `${ADD_ID_LUA}${REMOVE_ID_LUA}${OPEN_BUILDS_LUA}
if (redis.call('HGET', KEYS[1], 'gen') or '') ~= ARGV[1] or openBuilds(KEYS[2]) ~= ARGV[2] then return -1 end
local removals = tonumber(ARGV[3])
for i = 4, #KEYS do
  local field, id = ARGV[2 * i - 4], ARGV[2 * i - 3]
  if i <= removals + 3 then removeId(KEYS[i], field, id) else addId(KEYS[i], field, id) end
end
local moves = 2 * (#KEYS - 3) + 4
if ARGV[2] ~= '' and #ARGV >= moves then
  for i = moves, #ARGV, 1000 do redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
  redis.call('PEXPIRE', KEYS[3], ${WRITES_KEPT_MS})
end
return #KEYS - 3
`;

/**
 * A field of the claims hash that is no claim: its value is longer than any
 * hash Redis keeps as a listpack may hold, so the hash is a hashtable from
 * the first claim call on. It holds a claim for every row being created
 * fleet-wide, hundreds at a time; kept as a listpack (up to
 * `hash-max-listpack-entries`, 128 by default and 512 on some builds),
 * every claim, read and release scans all of them (a claim and its release
 * cost 13–24 µs of Redis at 150–500 claims, against 3–4 in a hashtable).
 * The field names no digest (those are 8 bytes), and nothing reads it.
 */
export const CLAIMS_PIN_FIELD = 'not a claim: keeps this hash a hashtable';
/** Longer than any `hash-max-listpack-value` in use (64 by default). */
const CLAIMS_PIN_BYTES = 1024;
// Lua: pins the claims hash (KEYS[1]) as a hashtable, once.
const PIN_CLAIMS_LUA = `
if redis.call('HEXISTS', KEYS[1], '${CLAIMS_PIN_FIELD}') == 0 then redis.call('HSET', KEYS[1], '${CLAIMS_PIN_FIELD}', string.rep('-', ${CLAIMS_PIN_BYTES})) end
`;

// Claims identities for rows about to create them. KEYS: claims. ARGV: (digest, claimant) per row.
// Returns, per row, the claimant holding it (this one when the claim is new or its own). A new claim
// is one HSETNX; only a claim already held is read.
const CLAIM_SCRIPT = `${PIN_CLAIMS_LUA}
local reply = {}
for i = 1, #ARGV, 2 do
  local current = ARGV[i + 1]
  if redis.call('HSETNX', KEYS[1], ARGV[i], current) == 0 then current = redis.call('HGET', KEYS[1], ARGV[i]) end
  reply[#reply + 1] = current
end
return reply
`;

// A create's claim and its index read in one call, for rows whose index is current. KEYS: claims,
// meta, then the identity bucket of each row. ARGV: the generation the buckets are of, then
// (digest, claimant) per row. Claims as CLAIM_SCRIPT; a row whose claim it is then has its identity
// looked up (as LOOKUP_SCRIPT): the read comes after the claim is taken, as when they were two calls.
// A person the index holds lets the claim go at once (as RELEASE_SCRIPT): the index answers for them.
// Returns, per row, the claimant holding the claim and the CustomerIDs (comma-separated, or nil when
// none, or when the claim is another's); or -1, having done nothing, when the generation is no longer
// the current one (a meta kept from before a build's switch: the creates since wrote into the new one).
const CLAIM_LOOKUP_SCRIPT = `
if redis.call('HGET', KEYS[2], 'gen') ~= ARGV[1] then return -1 end
${PIN_CLAIMS_LUA}
local reply = {}
for i = 3, #KEYS do
  local digest, claimant = ARGV[2 * i - 4], ARGV[2 * i - 3]
  local holder = claimant
  local ids = false
  if redis.call('HSETNX', KEYS[1], digest, claimant) == 0 then holder = redis.call('HGET', KEYS[1], digest) end
  if holder == claimant then
    ids = redis.call('HGET', KEYS[i], digest)
    if ids then redis.call('HDEL', KEYS[1], digest) end
  end
  reply[2 * i - 5] = holder
  reply[2 * i - 4] = ids
end
return reply
`;

// After creates: the customers' keys added to the index (as ADD_SCRIPT), and the creating rows'
// claims released (as RELEASE_SCRIPT), only into the generation readers use now: written into one a
// build has just replaced (a meta kept from before the switch), they would be in no index while their
// claims are gone. The customers' IDs (sortableId) go into the generation's set of its own creates, in
// the same call as their keys, unless the set is full (a delta then reads every page).
// KEYS: claims, meta, own creates, then one bucket per key added. ARGV: the generation the buckets
// are of, the number of claims R, the number of IDs C, R × (digest, claimant), C IDs, then
// (digest, CustomerID) per bucket.
// Returns -1 when that generation is no longer the current one (nothing written, the claims kept).
const CREATED_SCRIPT = `${ADD_ID_LUA}
if redis.call('HGET', KEYS[2], 'gen') ~= ARGV[1] then return -1 end
local releases, ids = tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, releases do
  local digest, claimant = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if redis.call('HGET', KEYS[1], digest) == claimant then redis.call('HDEL', KEYS[1], digest) end
end
local base = 3 + 2 * releases
if ids > 0 and redis.call('ZCARD', KEYS[3]) < ${OWN_CREATES_KEPT_MAX} then
  for i = 1, ids do redis.call('ZADD', KEYS[3], 0, ARGV[base + i]) end
end
base = base + ids
for i = 4, #KEYS do
  addId(KEYS[i], ARGV[base + 2 * (i - 3) - 1], ARGV[base + 2 * (i - 3)])
end
return #KEYS - 3
`;

// Looks keys up, one bucket each. KEYS: the buckets. ARGV: the keys' digests, in the same order.
// Returns, per key, its CustomerIDs comma-separated, or nil.
const LOOKUP_SCRIPT = `
local reply = {}
for i = 1, #KEYS do reply[i] = redis.call('HGET', KEYS[i], ARGV[i]) end
return reply
`;

// Releases a claim if this claimant holds it. KEYS: claims. ARGV: digest, claimant.
const RELEASE_SCRIPT = `
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`;

// Moves the index's end after a delta read, if the generation is still the one read from.
// KEYS: meta, the count of the delta's writes. ARGV: gen, refreshedAt, total, lastId, customers read and written,
// the end read from, the trust read at the delta's start.
// Moves the end only from where the delta read from (ARGV[6]): an end moved meanwhile (Redis came back without
// the delta before it, so its customers are in no index) is left for the next delta to read from. And only
// while Redis holds every customer the delta wrote (its count): one that came back without some of them is
// left where it was, for the next delta to read them again. A delta begun before Redis was found to have lost
// writes (the trust changed) moves the end but leaves the index to be read to its end again: what it read
// says nothing of the creates whose index writes were lost after it began. The generation's own creates up
// to the new end (KEYS[3], ARGV[8] the end's sortableId, '' for none) are forgotten: a delta counts only
// those past it. ARGV[9]: the own creates the delta left unread, counted among the customers all the same.
// Their keys need no count of their own: the delta wrote its last page after counting them, so a Redis that
// came back without any of them lost that write too (it loses its last writes, never earlier ones alone).
// Returns 1 when moved, 0 when the end or the generation changed, -1 when writes were lost.
const MOVE_END_SCRIPT = `${WRITES_KEPT_LUA}
if writesKept(KEYS[2]) ~= tonumber(ARGV[5]) then return -1 end
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
if (redis.call('HGET', KEYS[1], 'lastId') or '') ~= ARGV[6] then return 0 end
local refreshedAt = ARGV[2]
if (redis.call('HGET', KEYS[1], 'trust') or '') ~= ARGV[7] then refreshedAt = '${READ_TO_END_FIRST}' end
redis.call('HSET', KEYS[1], 'refreshedAt', refreshedAt, 'total', ARGV[3], 'lastId', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'count', tonumber(ARGV[5]) + tonumber(ARGV[9]))
redis.call('HINCRBY', KEYS[1], 'deltas', 1)
if ARGV[8] == '' then redis.call('DEL', KEYS[3]) else redis.call('ZREMRANGEBYLEX', KEYS[3], '-', '[' .. ARGV[8]) end
return 1
`;

// Opens a build: from now on updates keep their moves for it. Its place in the moves list is where the list
// ends now. KEYS: the builds under way (generation -> 'place|fields JSON'), the moves. ARGV: the generation,
// its fields (JSON), the expiry (ms).
const OPEN_BUILD_SCRIPT = `
redis.call('HSET', KEYS[1], ARGV[1], redis.call('LLEN', KEYS[2]) .. '|' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
`;

// Lua: a build ends (switched in, or not): it is under way no more, and the moves go once no build is.
const END_BUILD_LUA = `
local function endBuild(builds, moves, gen)
  redis.call('HDEL', builds, gen)
  if redis.call('HLEN', builds) == 0 then redis.call('DEL', moves) end
end`;

// Switches readers to a finished build, if Redis holds every customer it wrote; first the keys updates moved
// while it listed the customers are moved in it too (REPLACE_SCRIPT kept them from its opening on), in the
// order they were made, those of its kinds. A move's bucket is found as bucketKey finds it: the digest's
// first four bytes, big-endian, modulo the buckets. KEYS: meta, the count of the build's writes, the builds
// under way, the moves. ARGV: customers written, the build's generation, its buckets, its keys' prefix (up
// to the kind), its kinds (',i,EmailAddress,'), then the meta's (field, value) pairs. Returns what Redis kept
// of the count (switched in only when it is all of them).
const COMMIT_SCRIPT = `${WRITES_KEPT_LUA}${ADD_ID_LUA}${REMOVE_ID_LUA}${END_BUILD_LUA}
local kept = writesKept(KEYS[2])
if kept ~= tonumber(ARGV[1]) then return kept end
local buckets = tonumber(ARGV[3])
-- From its place in the list; a build whose place is gone (expired) takes every move kept.
local place = string.match(redis.call('HGET', KEYS[3], ARGV[2]) or '', '^(%d+)|')
local moves = redis.call('LRANGE', KEYS[4], tonumber(place or '0'), -1)
for i = 1, #moves, 4 do
  if string.find(ARGV[5], ',' .. moves[i + 1] .. ',', 1, true) then
    local b1, b2, b3, b4 = string.byte(moves[i + 2], 1, 4)
    local bucket = ARGV[4] .. moves[i + 1] .. ':' .. string.format('%d', (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % buckets)
    if moves[i] == '-' then removeId(bucket, moves[i + 2], moves[i + 3]) else addId(bucket, moves[i + 2], moves[i + 3]) end
  end
end
endBuild(KEYS[3], KEYS[4], ARGV[2])
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return kept
`;

// Ends a build that is not switched in (see endBuild). KEYS: the builds under way, the moves. ARGV: the build's generation.
const END_BUILD_SCRIPT = `${END_BUILD_LUA}
endBuild(KEYS[1], KEYS[2], ARGV[1])
return 0
`;

// After Redis lost writes: an index with a meta is to be read to its end before it is relied on, and
// deltas begun before now cannot make it current. KEYS: meta. ARGV: a new trust.
const DISTRUST_SCRIPT = `
if not redis.call('HGET', KEYS[1], 'gen') then return 0 end
redis.call('HSET', KEYS[1], 'trust', ARGV[1])
if redis.call('HGET', KEYS[1], 'refreshedAt') ~= '0' then redis.call('HSET', KEYS[1], 'refreshedAt', '${READ_TO_END_FIRST}') end
return 1
`;

const addScript = luaScript(ADD_SCRIPT);
const addCountedScript = luaScript(ADD_COUNTED_SCRIPT);
const moveEndScript = luaScript(MOVE_END_SCRIPT);
const commitScript = luaScript(COMMIT_SCRIPT);
const endBuildScript = luaScript(END_BUILD_SCRIPT);
const openBuildScript = luaScript(OPEN_BUILD_SCRIPT);
const distrustScript = luaScript(DISTRUST_SCRIPT);
const replaceScript = luaScript(REPLACE_SCRIPT);
const claimScript = luaScript(CLAIM_SCRIPT);
const claimLookupScript = luaScript(CLAIM_LOOKUP_SCRIPT);
const createdScript = luaScript(CREATED_SCRIPT);
const releaseScript = luaScript(RELEASE_SCRIPT);
const lookupScript = luaScript(LOOKUP_SCRIPT);

/**
 * The keys a customer carries in an index with these fields; `identity` is
 * its identity's digest when the caller has it already (a create's, worked
 * out for its claim). Digested afresh, not through the kept ones: a
 * customer's keys are written once.
 */
function keysOf(customer: Pick<Customer, 'FirstName' | 'LastName' | 'EmailAddress'> & Record<string, unknown>, fields: readonly string[], identity?: Buffer): Array<{ kind: KeyKind; digest: Buffer }> {
  const keys = [{ kind: 'i', digest: identity ?? freshDigestOf(identityKey(customer)) }];
  for (const field of fields) {
    const value = customer[field];
    if (typeof value === 'string' && value.trim() !== '') keys.push({ kind: field, digest: freshDigestOf(fieldKey(field, value)) });
  }
  return keys;
}

/** Buckets for an index expected to hold `customers`. */
export function bucketsFor(customers: number): number {
  return Math.max(16, Math.ceil((customers * GROWTH_ROOM) / ENTRIES_PER_BUCKET));
}

export type CustomerIndex = ReturnType<typeof createCustomerIndex>;

export function createCustomerIndex(redis: RedisClient, prefix: string) {
  const metaKey = `${prefix}:cix`;
  const claimsKey = `${prefix}:cix:claims`;
  // The builds under way (generation -> where their moves begin), and the moves updates made meanwhile, kept for them.
  const buildingKey = `${prefix}:cix:building`;
  const movesKey = `${prefix}:cix:moves`;
  const bucketKey = (gen: number, buckets: number, kind: KeyKind, digest: Buffer): string => `${prefix}:cix:${gen}:${kind}:${digest.readUInt32BE(0) % buckets}`;
  const ownCreatesKey = (gen: number): string => ownCreatesKeyOf(prefix, gen);

  const writesKey = (): string => `${prefix}:cix:written:${randomBytes(8).toString('hex')}`;

  /** Writes customers' keys; with `writes`, counted as IndexWrites says. */
  async function write(target: { gen: number; buckets: number; fields: readonly string[] }, customers: ReadonlyArray<Parameters<typeof keysOf>[0] & { CustomerID: string }>, writes?: IndexWrites): Promise<void> {
    // In calls of at most WRITE_CHUNK customers: a delta read during a long import brings tens of
    // thousands, and one script over all of them would hold Redis for as long.
    for (let first = 0; first < customers.length; first += WRITE_CHUNK) {
      const chunk = customers.slice(first, first + WRITE_CHUNK);
      const keys: string[] = writes ? [writes.key] : [];
      const args: Array<Buffer | string> = writes ? [String(chunk.length), String(WRITES_KEPT_MS)] : [];
      for (const customer of chunk) {
        for (const { kind, digest } of keysOf(customer, target.fields)) {
          keys.push(bucketKey(target.gen, target.buckets, kind, digest));
          args.push(digest, customer.CustomerID);
        }
      }
      if (!writes) {
        if (keys.length > 0) await addScript.run(redis, keys, args);
        continue;
      }
      await addCountedScript.run(redis, keys, args);
      writes.written += chunk.length;
    }
  }

  // Claims made in the same turn of the event loop (the rows of a batch start together) go in one call.
  const claim = coalesce<{ digest: Buffer; claimant: string }, string>(async (_key, claims) => {
    const args: Array<Buffer | string> = [];
    for (const c of claims) args.push(c.digest, c.claimant);
    const reply = await claimScript.run(redis, [claimsKey], args);
    if (!Array.isArray(reply) || reply.length !== claims.length) throw new Error(`unexpected reply from the claim script: ${String(reply)}`);
    return reply.map((holder) => (Buffer.isBuffer(holder) ? holder.toString() : String(holder)));
  });
  // A create's claim and index read, when its index is current: those of the turn's rows of one generation in
  // one call, or of the first row's `gatherMs` (the row protocol's, while its rows wait for a request slot).
  const claimLookup = coalesce<{ bucket: string; digest: Buffer; claimant: string; gatherMs: number }, { holder: string; ids: string[] } | undefined>(async (gen, rows) => {
    const keys: string[] = [claimsKey, metaKey];
    const args: Array<Buffer | string> = [gen];
    for (const r of rows) {
      keys.push(r.bucket);
      args.push(r.digest, r.claimant);
    }
    const reply = await claimLookupScript.run(redis, keys, args);
    if (reply === -1) {
      forget();
      return rows.map(() => undefined);
    }
    if (!Array.isArray(reply) || reply.length !== 2 * rows.length) throw new Error(`unexpected reply from the claim and lookup script: ${String(reply)}`);
    return rows.map((_, i) => {
      const holder: unknown = reply[2 * i];
      const ids: unknown = reply[2 * i + 1];
      return {
        holder: Buffer.isBuffer(holder) ? holder.toString() : String(holder),
        ids: ids === null || ids === undefined || ids === false ? [] : (Buffer.isBuffer(ids) ? ids.toString('latin1') : String(ids)).split(','),
      };
    });
  }, (row) => row.gatherMs);
  // A lookup of one key (a read-back's): those of the rows that ask in the same turn go in one script
  // call, not one command each.
  const lookupOne = coalesce<{ bucket: string; digest: Buffer }, string[]>(async (_key, lookups) => {
    const reply = await lookupScript.run(
      redis,
      lookups.map((l) => l.bucket),
      lookups.map((l) => l.digest),
    );
    if (!Array.isArray(reply) || reply.length !== lookups.length) throw new Error(`unexpected reply from the lookup script: ${String(reply)}`);
    return reply.map((value: unknown) => (value === null || value === undefined || value === false ? [] : (Buffer.isBuffer(value) ? value.toString('latin1') : String(value)).split(',')));
  });

  /**
   * The index writes of creates, with their claims' release, in one call.
   * `identity` is the digest of the identity each row claimed, which is
   * its customer's (the customer is made of the row's person).
   */
  /**
   * Runs `write` with the meta kept, then, while it finds its generation
   * replaced (it answers false, having written nothing), with the meta read
   * afresh. Nothing to write when there is no index.
   */
  async function inCurrentGeneration(write: (current: IndexMeta) => Promise<boolean>): Promise<void> {
    for (let fresh = false; ; fresh = true) {
      const current = await meta({ fresh });
      if (!current || (await write(current))) return;
    }
  }

  async function createdAll(rows: ReadonlyArray<{ customer: Customer; identity: Buffer; claimant: string }>): Promise<void> {
    if (rows.length === 0) return;
    // No index: nothing to add, and the claims stay (with their rows' outcomes, they are what tells a later import).
    await inCurrentGeneration(async (current) => {
      const keys: string[] = [claimsKey, metaKey, ownCreatesKey(current.gen)];
      const ids = rows.flatMap(({ customer }) => sortableId(customer.CustomerID) ?? []);
      const args: Array<Buffer | string> = [String(current.gen), String(rows.length), String(ids.length)];
      for (const { identity, claimant } of rows) args.push(identity, claimant);
      args.push(...ids);
      for (const { customer, identity } of rows) {
        for (const { kind, digest } of keysOf(customer, current.fields, identity)) {
          keys.push(bucketKey(current.gen, current.buckets, kind, digest));
          args.push(digest, customer.CustomerID);
        }
      }
      // -1: a generation switched in since the meta was kept.
      return Number(await createdScript.run(redis, keys, args)) >= 0;
    });
  }
  // So do the index writes of creates answered in the same turn.
  const created = coalesce<{ customer: Customer; identity: Buffer; claimant: string }, void>(async (_key, rows) => {
    await createdAll(rows);
    return rows.map(() => undefined);
  });

  async function readMeta(): Promise<IndexMeta | undefined> {
    const hash = await redis.hgetall(metaKey);
    if (hash.gen === undefined) return undefined;
    const n = (field: string): number => Number(hash[field] ?? 0);
    return {
      gen: n('gen'),
      buckets: n('buckets'),
      fields: parseFields(hash.fields),
      builtAt: n('builtAt'),
      refreshedAt: n('refreshedAt'),
      total: n('total'),
      lastId: hash.lastId ?? '',
      count: n('count'),
      appendOnly: hash.appendOnly === '1',
      deltas: n('deltas'),
      trust: hash.trust ?? '',
    };
  }

  // Every create and read-back asks for the meta: it is kept here for a moment (META_CACHE_MS). A
  // generation outlives its replacement's switch by one more build, so a reader that still holds the
  // meta of the one before finds its keys; the index's own writes read it afresh.
  const keptMeta = keptAWhile(readMeta, (m) => m !== undefined);
  const meta = keptMeta.get;
  // The builds under way (ascending), kept as the meta is.
  const keptBuilds = keptAWhile(async (): Promise<OpenBuild[]> =>
    Object.entries(await redis.hgetall(buildingKey))
      .map(([gen, value]) => ({ gen: Number(gen), fields: parseFields(value.slice(value.indexOf('|') + 1)) }))
      .sort((a, b) => a.gen - b.gen),
  );
  const building = keptBuilds.get;
  function forget(): void {
    keptMeta.forget();
    keptBuilds.forget();
  }

  return {
    meta,

    /**
     * Starts a new generation indexing `fields` beside the identity, before
     * the listing's first page is read: from then on, an update's move of a
     * customer's keys is kept for it (the build may read the customer before
     * the update). `sized` gives it its buckets once the count is known.
     */
    async openBuild(fields: readonly string[]): Promise<OpenBuild> {
      const gen = await redis.hincrby(metaKey, 'nextGen', 1);
      const open: OpenBuild = { gen, fields: [...new Set(fields)] };
      await openBuildScript.run(redis, [buildingKey, movesKey], [String(gen), JSON.stringify(open.fields), String(WRITES_KEPT_MS)]);
      forget();
      return open;
    },

    /** The open build sized for `expected` customers, ready for its writes. */
    sized(open: OpenBuild, expected: number): IndexBuild {
      return { gen: open.gen, buckets: bucketsFor(expected), fields: open.fields, key: writesKey(), written: 0 };
    },

    /** Starts a new generation sized for `expected` customers, indexing `fields` beside the identity (openBuild, then sized). */
    async beginBuild(expected: number, fields: readonly string[]): Promise<IndexBuild> {
      return this.sized(await this.openBuild(fields), expected);
    },

    /** Writes customers read by a full refresh into its generation. */
    async addToBuild(build: IndexBuild, customers: readonly Customer[]): Promise<void> {
      await write(build, customers, build);
    },

    /**
     * Switches readers to a finished build, then deletes the generation it
     * replaces. `state` is what the listing showed. An append-only index
     * that replaces another is switched in to be read to its end first
     * (READ_TO_END_FIRST): the creates answered while it was built wrote
     * into the generation it replaces and let their claims go, and those
     * after the listing's last read are in neither. (With no index before,
     * their claims stay, and tell.) Returns the `refreshedAt` it stored.
     */
    async commit(build: IndexBuild, state: Pick<IndexMeta, 'builtAt' | 'refreshedAt' | 'total' | 'lastId' | 'count' | 'appendOnly'>): Promise<number> {
      const previous = await meta({ fresh: true });
      const older = await redis.hmget(metaKey, 'prevGen', 'prevBuckets', 'prevFields');
      const refreshedAt = state.appendOnly && previous ? READ_TO_END_FIRST : state.refreshedAt;
      const fields: Record<string, string> = {
        gen: String(build.gen),
        buckets: String(build.buckets),
        fields: JSON.stringify(build.fields),
        builtAt: String(state.builtAt),
        refreshedAt: String(refreshedAt),
        total: String(state.total),
        lastId: state.lastId,
        count: String(state.count),
        appendOnly: state.appendOnly ? '1' : '0',
        deltas: '0',
        ...(previous && previous.gen !== build.gen ? { prevGen: String(previous.gen), prevBuckets: String(previous.buckets), prevFields: JSON.stringify(previous.fields) } : {}),
      };
      const kinds = `,${['i', ...build.fields].join(',')},`;
      const commitArgs = [String(build.written), String(build.gen), String(build.buckets), `${prefix}:cix:${build.gen}:`, kinds, ...Object.entries(fields).flat()];
      const kept = Number(await commitScript.run(redis, [metaKey, build.key, buildingKey, movesKey], commitArgs));
      forget();
      if (kept !== build.written) throw new IndexWritesLostError(build.written, kept);
      // The generation before the one just replaced goes now; the one just replaced at the next switch.
      const [olderGen, olderBuckets, olderFields] = older;
      if (previous && previous.gen !== build.gen && olderGen && olderGen !== String(build.gen)) {
        await dropGeneration(redis, prefix, { gen: Number(olderGen), buckets: Number(olderBuckets), fields: parseFields(olderFields ?? undefined) });
      }
      return refreshedAt;
    },

    /** Abandons a build (its listing failed, or it is not needed): its keys go. */
    async abandon(build: IndexBuild | OpenBuild): Promise<void> {
      await endBuildScript.run(redis, [buildingKey, movesKey], [String(build.gen)]);
      forget();
      if (!('buckets' in build)) return;
      await redis.del(build.key);
      await dropGeneration(redis, prefix, build);
    },

    /** Starts counting a delta's writes (see IndexWrites). */
    beginDelta(): IndexWrites {
      return { key: writesKey(), written: 0 };
    },

    /**
     * How many of subsync's own creates generation `gen` holds with
     * CustomerIDs strictly between `after` and `before` (after `after` when
     * none), written with their keys, past the index's end; undefined when
     * either ID has no sortableId. A delta that finds a stretch of the
     * listing between two such IDs exactly this long knows the stretch is
     * these creates.
     */
    async ownCreatesBetween(gen: number, after: string, before?: string): Promise<number | undefined> {
      const [from, to] = [sortableId(after), before === undefined ? '+' : sortableId(before)];
      if (from === undefined || to === undefined) return undefined;
      return redis.zlexcount(ownCreatesKey(gen), `(${from}`, to === '+' ? to : `(${to}`);
    },

    /** Writes customers a delta read, a page at a time, into the current generation. */
    async addToDelta(writes: IndexWrites, customers: readonly Customer[]): Promise<void> {
      const current = await meta();
      if (current) await write(current, customers, writes);
    },

    /**
     * Moves the index's end once a delta has read and written the customers
     * after it: only onto the generation and from the end the delta read
     * from, and only while Redis holds every customer it wrote. `moved`,
     * or why not (`lost`: Redis came back without some of its writes, so
     * the next delta reads them again).
     */
    async moveEnd(writes: IndexWrites, state: Pick<IndexMeta, 'refreshedAt' | 'total' | 'lastId' | 'gen' | 'trust'> & { from: string; skipped?: number }): Promise<'moved' | 'changed' | 'lost'> {
      const reply = Number(
        await moveEndScript.run(
          redis,
          [metaKey, writes.key, ownCreatesKey(state.gen)],
          [String(state.gen), String(state.refreshedAt), String(state.total), state.lastId, String(writes.written), state.from, state.trust, sortableId(state.lastId) ?? '', String(state.skipped ?? 0)],
        ),
      );
      forget();
      return reply === 1 ? 'moved' : reply === 0 ? 'changed' : 'lost';
    },

    /** The fields keyed beside the identity by the index readers use and by the builds under way: an update that changes one moves keys. */
    async keyedFields(): Promise<string[]> {
      const [current, builds] = await Promise.all([meta(), building()]);
      return [...new Set([...(current?.fields ?? []), ...builds.flatMap((b) => b.fields)])];
    },

    /**
     * Moves a customer's keys after subsync changed it (an update of names
     * or email), in the generation current at that instant; and, while a
     * build lists the customers, kept for the build, which applies it when
     * it is switched in (it may have read the customer before the update).
     */
    async replace(before: Customer, after: Customer): Promise<void> {
      for (let fresh = false; ; fresh = true) {
        const [current, builds] = await Promise.all([meta({ fresh }), building({ fresh })]);
        const keys: string[] = [metaKey, buildingKey, movesKey];
        const removed = current ? keysOf(before, current.fields) : [];
        const args: Array<Buffer | string> = [current ? String(current.gen) : '', builds.map((b) => b.gen).join(','), String(removed.length)];
        if (current) {
          for (const [customer, kinds] of [[before, removed], [after, keysOf(after, current.fields)]] as const) {
            for (const { kind, digest } of kinds) {
              keys.push(bucketKey(current.gen, current.buckets, kind, digest));
              args.push(digest, customer.CustomerID);
            }
          }
        }
        if (builds.length > 0) {
          // The kinds of every build under way: each applies those it indexes.
          const fields = [...new Set(builds.flatMap((b) => b.fields))];
          for (const [op, customer] of [['-', before], ['+', after]] as const) {
            for (const { kind, digest } of keysOf(customer, fields)) args.push(op, kind, digest, customer.CustomerID);
          }
        }
        // Always asked, even with no index nor build seen: one may have begun since they were read. -1: one
        // did, or a generation was switched in, since (nothing written); asked again with them read afresh.
        if (Number(await replaceScript.run(redis, keys, args)) >= 0) return;
      }
    },

    /**
     * After Redis came back without some of its writes: the index may lack
     * customers created since it was last read to its end (their index
     * writes and their rows' claims lost), though its meta says it is
     * current. From now on it is read to its end before a create relies on
     * it, and deltas begun before now cannot make it current.
     * Resolves once no process can still hold the meta from before (kept
     * META_CACHE_MS), so that the caller may let creates go.
     */
    async distrust(): Promise<void> {
      await distrustScript.run(redis, [metaKey], [randomBytes(8).toString('hex')]);
      forget();
      await new Promise((resolve) => setTimeout(resolve, META_CACHE_MS));
    },

    /** Marks the index as behind: only a full refresh makes it current again (the listing did not grow at its end). */
    async markStale(): Promise<void> {
      await redis.hset(metaKey, { refreshedAt: '0' });
      forget();
    },

    /** The CustomerIDs under each key (empty when none), in order. */
    async lookup(current: IndexMeta, kind: KeyKind, keys: readonly string[]): Promise<string[][]> {
      return this.lookupDigests(current, kind, keys.map(digestOf));
    },

    /** The same, by the keys' digests. */
    async lookupDigests(current: IndexMeta, kind: KeyKind, digests: readonly Buffer[]): Promise<string[][]> {
      if (digests.length === 0) return [];
      if (digests.length === 1) {
        // A create's own lookup: gathered with the turn's others into one call on the connection's
        // auto-pipeline (an explicit pipeline is a socket write of its own, once per row).
        const [digest] = digests as [Buffer];
        return [await lookupOne('', { bucket: bucketKey(current.gen, current.buckets, kind, digest), digest })];
      }
      const pipeline = redis.pipeline();
      for (const digest of digests) pipeline.hgetBuffer(bucketKey(current.gen, current.buckets, kind, digest), digest);
      const replies = (await pipeline.exec()) ?? [];
      return replies.map(([error, value]) => {
        if (error) throw error;
        return Buffer.isBuffer(value) ? value.toString('latin1').split(',') : [];
      });
    },

    /**
     * Claims an identity (by its digest) for a row whose create is about to
     * be sent; returns the claimant that holds it (`claimant` itself when
     * the claim is this row's). Released once the row settles.
     */
    async claimDigest(digest: Buffer, claimant: string): Promise<string> {
      return claim('', { digest, claimant });
    },

    /**
     * Claims an identity (as claimDigest) and, when the claim is this
     * claimant's, reads its CustomerIDs in `current` (as lookup), in one
     * call gathered with the turn's others. When the index holds the
     * person, the claim is let go in the same call (as releaseDigest):
     * the index answers for them. `ids` is empty when the claim is
     * another's. Undefined, having claimed nothing, when `current` is no
     * longer the index readers use (a build switched another in since):
     * ask again with the meta read afresh. With `gatherMs`, a call that
     * starts a gathering gathers that many ms of calls, not one turn's.
     */
    async claimAndLookup(current: IndexMeta, digest: Buffer, claimant: string, gatherMs = 0): Promise<{ holder: string; ids: string[] } | undefined> {
      return claimLookup(String(current.gen), { bucket: bucketKey(current.gen, current.buckets, 'i', digest), digest, claimant, gatherMs });
    },

    /**
     * After a create: the customer's keys go into the index, and the
     * claimant's claim on `key` is released (the index answers for the
     * person now), in one call for the creates answered together. Without
     * an index, neither: the claim is kept.
     */
    async created(customer: Customer, key: string, claimant: string): Promise<void> {
      await created('', { customer, identity: digestOf(key), claimant });
    },

    /** The same for creates the caller gathered itself, in one call (the row protocol's, with their settle). */
    createdAll,

    /** Releases the claim on an identity (by its digest) if `claimant` holds it. */
    async releaseDigest(digest: Buffer, claimant: string): Promise<void> {
      await releaseScript.run(redis, [claimsKey], [digest, claimant]);
    },

    /** Hands the claim on an identity (by its digest) over to `claimant` (its holder's row ended without creating the person). */
    async takeOverDigest(digest: Buffer, claimant: string): Promise<void> {
      await redis.hset(claimsKey, digest, claimant);
    },

    /**
     * Bytes of Redis the current generation takes (MEMORY USAGE of each bucket and of its set of own creates), and
     * its keys; `ownCreatesBytes` is the set's part (the IDs of creates past the index's end, dropped as the end moves).
     */
    async memory(): Promise<{ bytes: number; keys: number; ownCreatesBytes: number } | undefined> {
      const current = await meta();
      if (!current) return undefined;
      let bytes = 0;
      let keys = 0;
      for (const kind of ['i', ...current.fields]) {
        for (let first = 0; first < current.buckets; first += 1000) {
          const pipeline = redis.pipeline();
          for (let b = first; b < Math.min(current.buckets, first + 1000); b++) pipeline.call('MEMORY', 'USAGE', `${prefix}:cix:${current.gen}:${kind}:${b}`, 'SAMPLES', '0');
          for (const [error, value] of (await pipeline.exec()) ?? []) {
            if (error || typeof value !== 'number') continue;
            bytes += value;
            keys++;
          }
        }
      }
      // MEMORY USAGE answers null for a key that is not there: no own creates lie past the end now.
      const ownCreatesBytes = Number(await redis.call('MEMORY', 'USAGE', ownCreatesKey(current.gen), 'SAMPLES', '0')) || 0;
      return { bytes: bytes + ownCreatesBytes, keys: keys + (ownCreatesBytes > 0 ? 1 : 0), ownCreatesBytes };
    },
  };
}

/**
 * `read`'s answer kept for META_CACHE_MS, asked afresh with `fresh`. An
 * answer `keep` refuses (no index is never kept: another process may be
 * building one this moment) or a failed read is forgotten at once.
 */
function keptAWhile<T>(read: () => Promise<T>, keep: (value: T) => boolean = () => true): { get(options?: { fresh?: boolean }): Promise<T>; forget(): void } {
  let kept: { at: number; value: Promise<T> } | undefined;
  const forget = (): void => {
    kept = undefined;
  };
  return {
    get(options = {}) {
      const now = Date.now();
      if (options.fresh || !kept || now - kept.at > META_CACHE_MS) {
        const value = read();
        kept = { at: now, value };
        value.then((v) => (keep(v) ? undefined : forget()), forget);
      }
      return kept.value;
    },
    forget,
  };
}

function parseFields(text: string | undefined): string[] {
  try {
    const parsed: unknown = JSON.parse(text ?? '[]');
    return Array.isArray(parsed) ? parsed.filter((f): f is string => typeof f === 'string') : [...DEFAULT_INDEXED_FIELDS];
  } catch {
    return [...DEFAULT_INDEXED_FIELDS];
  }
}

/** The sorted set of a generation's own creates past its end (see CREATED_SCRIPT). */
const ownCreatesKeyOf = (prefix: string, gen: number): string => `${prefix}:cix:${gen}:created`;

async function dropGeneration(redis: RedisClient, prefix: string, target: { gen: number; buckets: number; fields: readonly string[] }): Promise<void> {
  await redis.unlink(ownCreatesKeyOf(prefix, target.gen));
  for (const kind of ['i', ...target.fields]) {
    for (let first = 0; first < target.buckets; first += 500) {
      const keys = Array.from({ length: Math.min(500, target.buckets - first) }, (_, i) => `${prefix}:cix:${target.gen}:${kind}:${first + i}`);
      // On a Redis Cluster a multi-key UNLINK must stay in one slot: the hash-tagged prefix gives that.
      await redis.unlink(...keys);
    }
  }
}
