import { randomBytes, randomUUID } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig, type Config } from '../config.js';
import { createLogger } from '../log.js';
import { importFile, type ImportResult } from '../import/producer.js';
import { importStatus, type ImportStatus } from '../import/status.js';
import { samplesDir } from '../paths.js';
import { createRedis, deleteKeysWithPrefix } from '../redis/redis.js';
import { openRuntime, startWorkers } from '../runtime.js';
import { startSandbox } from '../sandbox/server.js';
import { ROW_STATUSES } from '../outcomes.js';
import { FileRejectedError } from '../csv/errors.js';
import { waitForExport } from '../export/wait.js';
import { createExportStore } from '../export/state.js';
import { enqueueExport } from '../export/job.js';

/**
 * The end-to-end demo: the in-process sandbox and a worker,
 * every file in samples/ imported through Redis, a table of outcomes per file
 * and where the results are, then an export of every customer. Needs only Redis. Its queue keys live under a
 * prefix of their own and are removed at the end; the results files stay.
 */
export async function runDemo(print: (line: string) => void = console.log, env?: NodeJS.ProcessEnv): Promise<ImportStatus[]> {
  // Quiet unless SUBSYNC_LOG_LEVEL asks otherwise: the table is the demo's output.
  const base = loadConfig(env, { defaults: { SUBSYNC_LOG_LEVEL: 'error' } });
  const logger = createLogger({ level: base.logLevel, destination: process.stderr });
  const sandbox = await startSandbox({ port: 0 });
  const prefix = `subsync-demo-${randomUUID().slice(0, 8)}`;
  // The demo's card data is sealed with a key of its own unless one is configured.
  const config: Config = { ...base, apiUrl: sandbox.url, queuePrefix: prefix, cardKey: base.cardKey ?? randomBytes(32) };
  let runtime;
  try {
    runtime = await openRuntime(config, logger);
  } catch (error) {
    await sandbox.close();
    throw error;
  }
  try {
    print(`sandbox on ${sandbox.url}; Redis at ${config.redisUrl} (keys under ${prefix}:, removed at the end)`);
    startWorkers(runtime, { apiUrl: sandbox.url, concurrency: 8 });
    const dir = samplesDir();
    const files = (await readdir(dir)).filter((f) => f.endsWith('.csv')).sort();
    const started: Array<{ file: string; result: ImportResult | FileRejectedError }> = [];
    for (const file of files) {
      try {
        // The sandbox's seeded customers have no password, so the sample updates may send theirs empty.
        const request = { file: path.join(dir, file), sendEmptyPasswords: file === 'customer-updates.csv' };
        started.push({ file, result: await importFile(request, { store: runtime.store, queues: runtime.queues, keyring: runtime.keyring, logger }) });
      } catch (error) {
        if (!(error instanceof FileRejectedError)) throw error;
        started.push({ file, result: error });
      }
    }
    const statuses: ImportStatus[] = [];
    const rows: string[][] = [['file', 'kind', 'rows', ...ROW_STATUSES, 'results']];
    for (const { file, result } of started) {
      if (result instanceof FileRejectedError) {
        rows.push([file, '', '', ...ROW_STATUSES.map(() => ''), `rejected: ${result.message}`]);
        continue;
      }
      const status = await finished(runtime.store, result.importId);
      statuses.push(status);
      rows.push([file, status.kind, String(status.total ?? 0), ...ROW_STATUSES.map((s) => String(status.counts[s] || '')), path.relative(process.cwd(), status.resultsDir ?? '') || '.']);
    }
    const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
    for (const row of rows) print(row.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ').trimEnd());
    print('');
    print('Each results folder holds results.csv (every row and its outcome), errors.csv (the rows to fix) and summary.json.');

    // Then every customer of the sandbox back out into a file, as the nightly export does.
    const exportId = await enqueueExport(runtime.queues.control, { format: 'csv', gzip: false });
    const exported = await waitForExport(createExportStore(runtime.redis, runtime.config.queuePrefix), runtime.queues, exportId);
    print(`export: ${exported.count ?? 0} customers in ${path.relative(process.cwd(), exported.file ?? '')} (manifest ${path.relative(process.cwd(), exported.manifest ?? '')})`);
    return statuses;
  } finally {
    await runtime.close();
    await sandbox.close();
    await removeKeys(config, prefix);
  }
}

async function finished(store: Parameters<typeof importStatus>[0], importId: string): Promise<ImportStatus> {
  for (;;) {
    const status = await importStatus(store, importId);
    if (status?.finished) return status;
    await sleep(100);
  }
}

async function removeKeys(config: Config, prefix: string): Promise<void> {
  const redis = createRedis(config.redisUrl, { cluster: config.redisCluster });
  try {
    await deleteKeysWithPrefix(redis, prefix);
  } finally {
    redis.disconnect();
  }
}
