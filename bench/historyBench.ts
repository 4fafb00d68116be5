/**
 * Row 6: the run history and search on a Redis holding one import of ROWS
 * rows (default 100,000) beside IMPORTS small ones (default 1,000):
 *
 * - `find` by email, by CustomerID and by last name through the per-import
 *   search index, against a baseline that scans the big import's ledger for
 *   the same email (what a search without an index costs);
 * - a page of the history (50 imports) and a history filtered by state
 *   (every import read), against one ZREVRANGE of the same page;
 * - the settle script with the series and the search index, per row settled
 *   in batches of 8, against a copy of the script without them;
 * - the search index's Redis memory against the ledger's.
 *
 * Enqueued by the producer in this process, no workers: the rows stay
 * pending, which is what search reads as well as any other state.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { findRows } from '../src/import/find.js';
import { importHistory } from '../src/import/history.js';
import { importFile } from '../src/import/producer.js';
import { luaScript } from '../src/redis/script.js';
import { encodeEntry, type LedgerEntry } from '../src/store/ledger.js';
import { termDigest } from '../src/store/searchIndex.js';
import { log, median, openBenchRuntime, type BenchRow } from './support.js';

/** The settle script as it was before the series and the search index: the baseline. */
const SETTLE_WITHOUT = `
local function isOpen(ledger, row)
  local current = redis.call('HGET', ledger, row)
  if not current then return true end
  local s = cjson.decode(current).s
  return s == 'pending' or s == 'sent'
end
local function add(field, by)
  local n = tonumber(by or '0')
  if n ~= 0 then redis.call('HINCRBY', KEYS[2], field, n) end
end
add('apiCalls', ARGV[2])
add('retries', ARGV[3])
add('rateLimited', ARGV[4])
add('searches', ARGV[5])
add('reads', ARGV[6])
local reply = {0, 0, 0}
local any = false
for i = 7, #ARGV, 3 do
  if isOpen(KEYS[1], ARGV[i]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    redis.call('HINCRBY', KEYS[2], ARGV[i + 2], 1)
    redis.call('HINCRBY', KEYS[2], 'settled', 1)
    any = true
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
if any then redis.call('HSET', KEYS[3], 'lastSettledAt', ARGV[1]) end
reply[1] = tonumber(redis.call('HGET', KEYS[2], 'settled') or '0')
reply[2] = tonumber(redis.call('HGET', KEYS[3], 'total') or '-1')
reply[3] = tonumber(redis.call('HGET', KEYS[3], 'round') or '0')
return reply
`;

/** Median milliseconds of `times` runs of `task`. */
async function timed(times: number, task: () => Promise<unknown>): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < times; i++) {
    const t = performance.now();
    await task();
    ms.push(performance.now() - t);
  }
  return median(ms);
}

export async function historyBench(rows: number, smallImports: number): Promise<BenchRow[]> {
  const bench = await openBenchRuntime();
  const { store, queues, logger, redis } = bench.runtime;
  try {
    const file = path.join(bench.dataDir, 'updates.csv');
    const lines = ['CustomerID,FirstName,LastName,EmailAddress'];
    for (let i = 1; i <= rows; i++) lines.push(`${100_000 + i},Name${i % 500},Family${i},person${i}@example.com`);
    await writeFile(file, `${lines.join('\n')}\n`);
    const started = performance.now();
    const result = await importFile({ file, sendEmptyPasswords: true }, { store, queues, keyring: undefined, logger });
    const producerSeconds = (performance.now() - started) / 1000;
    if (result.outcome !== 'enqueued') throw new Error(`the import was ${result.outcome}`);
    log(`history bench: ${rows} rows enqueued in ${producerSeconds.toFixed(1)} s`);

    // Small imports beside it, each with a record, counts and a few search terms.
    for (let i = 0; i < smallImports; i++) {
      const id = `small-${i}`;
      await store.createImport({ id, file: `small-${i}.csv`, kind: 'customers', headers: ['EmailAddress'], paths: ['EmailAddress'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now() - (i + 1) * 1000, state: 'enqueued', round: 0 });
      await store.addSearchTerms(id, new Map([[termDigest(`small${i}@example.com`), [1]], [termDigest(`family${i}`), [1]]]));
    }

    const probe = Math.ceil(rows * 0.73);
    const email = `person${probe}@example.com`;
    const [byEmail, byId, byName] = [await timed(15, () => findRows(store, email)), await timed(15, () => findRows(store, String(100_000 + probe))), await timed(15, () => findRows(store, `Family${probe}`))];
    const check = await findRows(store, email);
    if (check.hits.length !== 1 || check.hits[0]?.row !== probe) throw new Error(`find by email found ${JSON.stringify(check.hits)}`);
    const scan = await timed(3, async () => {
      for await (const { entry } of store.rowsInOrder(result.importId, rows)) if (entry.cells[3] === email) return;
    });
    log(`find: email ${byEmail.toFixed(1)} ms, id ${byId.toFixed(1)} ms, name ${byName.toFixed(1)} ms; ledger scan ${scan.toFixed(0)} ms`);

    const page = await timed(15, () => importHistory(store, { limit: 50 }));
    const filtered = await timed(5, () => importHistory(store, { limit: 50, state: 'running' }));
    const zrange = await timed(15, () => store.listImportIds(50));
    log(`history: page ${page.toFixed(1)} ms, filtered ${filtered.toFixed(1)} ms; ZREVRANGE ${zrange.toFixed(2)} ms`);

    const indexBytes = Number(await redis.call('MEMORY', 'USAGE', store.keys.searchIndex(result.importId), 'SAMPLES', '0'));
    const ledgerBytes = Number(await redis.call('MEMORY', 'USAGE', store.keys.ledger(result.importId), 'SAMPLES', '0'));

    // The settle script, with and without the series and search index, on imports of their own.
    const settleRows = 20_000;
    // Each row with a CustomerID of its own, as the service answers creates.
    const entry = (status: LedgerEntry['status'], row = 0): LedgerEntry => ({ cells: ['', 'Ann', 'Lee', 'ann@example.com'], job: 'customer.create', status, attempts: 1, ...(status === 'pending' ? {} : { customerId: String(500_000 + row) }) });
    const prepare = async (id: string): Promise<void> => {
      await store.createImport({ id, file: 'settle.csv', kind: 'customers', headers: ['CustomerID'], paths: ['CustomerID'], options: { expiryFormat: 'MMYY', attempts: 3 }, createdAt: Date.now(), state: 'enqueuing', round: 0 });
      for (let first = 1; first <= settleRows; first += 1000) {
        await store.putPendingRows(id, Array.from({ length: 1000 }, (_, i) => ({ row: first + i, entry: entry('pending') })));
      }
    };
    await Promise.all([prepare('settle-with'), prepare('settle-without')]);
    const without = luaScript(SETTLE_WITHOUT);
    const settleAll = async (settle: (rows: Array<{ row: number; entry: LedgerEntry }>) => Promise<unknown>): Promise<number> => {
      const t = performance.now();
      for (let first = 1; first <= settleRows; first += 8) await settle(Array.from({ length: 8 }, (_, i) => ({ row: first + i, entry: entry('created', first + i) })));
      return settleRows / ((performance.now() - t) / 1000);
    };
    const withRate = await settleAll((batch) => store.settleRows('settle-with', batch, { apiCalls: 8, retries: 0, rateLimited: 1, searches: 0, reads: 0 }));
    const withoutRate = await settleAll((batch) => {
      const args = [String(Date.now()), '8', '0', '1', '0', '0'];
      for (const { row, entry: e } of batch) args.push(String(row), encodeEntry(e), e.status);
      return without.run(redis, [store.keys.ledger('settle-without'), store.keys.counts('settle-without'), store.keys.importRecord('settle-without')], args);
    });
    log(`settle: ${withRate.toFixed(0)} rows/s with series and index, ${withoutRate.toFixed(0)} without`);

    const size = `${rows.toLocaleString('en')}-row import + ${smallImports.toLocaleString('en')} small imports`;
    return [
      { figure: `6. find by email, ${size} (ms, median of 15)`, subsync: byEmail, baseline: scan, baselineLabel: 'scan of the big import\'s ledger for the email (ms)', note: 'per-import search index, one HMGET per import, pipelined' },
      { figure: `6. find by CustomerID, ${size} (ms)`, subsync: byId, baseline: scan, baselineLabel: 'the same ledger scan (ms)', note: '' },
      { figure: `6. find by last name, ${size} (ms)`, subsync: byName, baseline: scan, baselineLabel: 'the same ledger scan (ms)', note: '' },
      { figure: `6. history, a page of 50, ${size} (ms)`, subsync: page, baseline: zrange, baselineLabel: 'ZREVRANGE of the page alone (ms)', note: 'records and counts of the page in one pipeline' },
      { figure: `6. history filtered by state (every import read), ${size} (ms)`, subsync: filtered, baseline: zrange, baselineLabel: 'ZREVRANGE of one page (ms)', note: '200 imports a round trip' },
      { figure: '6. settle, batches of 8 rows (rows/s)', subsync: withRate, baseline: withoutRate, baselineLabel: 'the settle script without series and search index (rows/s)', note: `${settleRows.toLocaleString('en')} rows each` },
      { figure: `6. search index of the ${rows.toLocaleString('en')}-row import (bytes per row)`, subsync: indexBytes / rows, baseline: ledgerBytes / rows, baselineLabel: 'its ledger (bytes per row)', note: `producer ${Math.round(rows / producerSeconds).toLocaleString('en')} rows/s with it, in process` },
    ];
  } finally {
    await bench.close();
  }
}
