import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { ReplyError } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../src/api/errors.js';
import { CardKeyError } from '../../src/cards/crypto.js';
import { EXIT_CODES, EXIT_OF_CODE, ImportStalledError, RowsDidNotSucceedError, errorCodeOf, exitReportFor } from '../../src/cli/exitCodes.js';
import { ConfigError } from '../../src/config.js';
import { ColumnMapError, CsvFormatError, FileRejectedError } from '../../src/csv/errors.js';
import { DashboardNeedsTokenError } from '../../src/dashboard/auth.js';
import { ERROR_CODES } from '../../src/errors.js';
import { ExportFailedError, ExportIncompleteError } from '../../src/export/errors.js';
import { ScheduleError } from '../../src/export/schedule.js';
import { RetryError } from '../../src/import/retry.js';
import { ImportNotFoundError } from '../../src/import/status.js';
import { RedisCheckError } from '../../src/redis/redis.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { envOf, startPipeline, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

/** A file-system error as Node raises it. */
function fsError(code: string, file?: string): Error {
  return Object.assign(new Error(`${code}: ${file ?? ''}`), { code, ...(file === undefined ? {} : { path: file }) });
}

describe('exit codes of files that cannot be read', () => {
  it('subsync import of a missing file or of a folder exits 2 with one line', async () => {
    pipeline = await startPipeline({ workers: false });
    const missing = path.join(pipeline.dataDir, 'no-such.csv');
    const run = subsync(['import', missing], envOf(pipeline));
    expect((await run.exited).code).toBe(2);
    expect(run.stderr().split('\n').filter((line) => line.startsWith('subsync:'))).toEqual([`subsync: ${missing}: no such file`]);
    expect(run.stderr()).not.toContain('    at ');

    const folder = path.join(pipeline.dataDir, 'a-folder.csv');
    await mkdir(folder);
    const dir = subsync(['import', '--kind', 'customers', folder], envOf(pipeline));
    expect((await dir.exited).code).toBe(2);
    expect(dir.stderr().split('\n').filter((line) => line.startsWith('subsync:'))).toEqual([`subsync: ${folder}: is a folder, not a CSV file`]);
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
  });

  it('maps only errors about a file named on the command line, and only for commands that read files', () => {
    expect(exitReportFor(fsError('ENOENT', '/data/x.csv'), ['import', '/data/x.csv'])).toEqual({ code: EXIT_CODES.rejectedFile, message: 'subsync: /data/x.csv: no such file' });
    expect(exitReportFor(fsError('ENOENT', path.resolve('x.csv')), ['import', '--kind', 'customers', 'x.csv']).code).toBe(EXIT_CODES.rejectedFile);
    expect(exitReportFor(fsError('EACCES', '/data/x.csv'), ['import', '/data/x.csv']).code).toBe(EXIT_CODES.rejectedFile);
    // Another file missing (the data dir's, say) is not the operator's file: unexpected, with its stack.
    expect(exitReportFor(fsError('ENOENT', '/var/lib/other'), ['import', '/data/x.csv']).code).toBe(EXIT_CODES.failure);
    expect(exitReportFor(fsError('ENOENT', '/data/x.csv'), ['worker']).code).toBe(EXIT_CODES.failure);
    // EISDIR names no path: only when an operand is a folder.
    expect(exitReportFor(fsError('EISDIR'), ['import', '/tmp/surely-not-here.csv']).code).toBe(EXIT_CODES.failure);
    expect(exitReportFor(fsError('EISDIR'), ['import', path.dirname(import.meta.dirname)]).code).toBe(EXIT_CODES.rejectedFile);
  });
});

describe('exit codes of the errors a command lets out, by their code', () => {
  // The numbers are the documented ones (README, Commands), written out: a change of the table shows here.
  const expected: Array<[string, Error, number]> = [
    ['FILE_REJECTED', new FileRejectedError('in.csv', ['unknown column "EmailAdress" (did you mean "EmailAddress"?)']), 2],
    ['CSV_FORMAT', new CsvFormatError('in.csv', 7, 'a quoted cell is never closed'), 2],
    ['COLUMN_MAP', new ColumnMapError('map.json', ['not JSON']), 2],
    ['ROWS_DID_NOT_SUCCEED', new RowsDidNotSucceedError('2 of 5 rows did not succeed: see var/results/x/errors.csv'), 3],
    ['EXPORT_INCOMPLETE', new ExportIncompleteError('export-1', 'var/exports/export-1.manifest.json'), 3],
    ['EXPORT_FAILED', new ExportFailedError('export-1', 'Not authorised (API_UNAUTHORIZED 401)'), 1],
    ['RETRY_REFUSED', new RetryError('import imp-1 has no row 9'), 64],
    ['SCHEDULE_INVALID', new ScheduleError('cron pattern "0 0 31 2 *" never fires'), 64],
    ['IMPORT_NOT_FOUND', new ImportNotFoundError('imp-1'), 66],
    ['REDIS_UNREACHABLE', new RedisCheckError('REDIS_UNREACHABLE', 'Redis is not reachable at redis://127.0.0.1:1 (ECONNREFUSED)'), 69],
    ['REDIS_EVICTION', new RedisCheckError('REDIS_EVICTION', 'Redis may evict keys (maxmemory-policy allkeys-lru)'), 69],
    ['REDIS_OOM', new ReplyError("OOM command not allowed when used memory > 'maxmemory'."), 69],
    ['IMPORT_STALLED', new ImportStalledError('12 rows remain and no worker is running'), 75],
    ['DASHBOARD_NEEDS_TOKEN', new DashboardNeedsTokenError('0.0.0.0'), 78],
    ['CONFIG_INVALID', new ConfigError([{ variable: 'SUBSYNC_RATE', value: 'abc', expected: 'a positive number of requests per second' }]), 78],
  ];

  it.each(expected)('%s exits %i with one line on stderr, no stack', (code, error, exit) => {
    expect(errorCodeOf(error)).toBe(code);
    const report = exitReportFor(error, ['status']);
    expect(report.code).toBe(exit);
    expect(report.message).toMatch(/^subsync: /);
    expect(report.message).not.toContain('    at ');
  });

  it('says what each of those means in its own words', () => {
    expect(exitReportFor(new ImportNotFoundError('imp-1'), ['status']).message).toBe(`subsync: ${new ImportNotFoundError('imp-1').message}`);
    expect(exitReportFor(new ReplyError("OOM command not allowed when used memory > 'maxmemory'."), ['import']).message).toMatch(/^subsync: Redis is out of memory .*this command stopped/);
    expect(exitReportFor(new ConfigError([{ variable: 'SUBSYNC_RATE', value: 'abc', expected: 'a positive number' }]), ['worker']).message).toBe(
      'subsync: invalid configuration (see subsync --help):\n  SUBSYNC_RATE="abc": expected a positive number',
    );
  });

  it('prints the stack and exits 1 for a code no command is meant to let out', () => {
    const unexpected: Error[] = [
      ApiError.fromResponse({ endpoint: 'searchCustomers', method: 'GET', status: 401, apiMessage: 'Not authorised', retryAfter: undefined }),
      new CardKeyError('CARD_KEY_UNKNOWN', 'card data was sealed with key id "k0", which the keyring does not hold', 'k0'),
    ];
    for (const error of unexpected) {
      const report = exitReportFor(error, ['export']);
      expect(EXIT_OF_CODE[errorCodeOf(error) ?? 'CONFIG_INVALID']).toBe('unexpected');
      expect(report.code).toBe(1);
      expect(report.message).toContain('    at ');
    }
  });

  it('goes by the code, never by the words: an error that only reads like a known one is unexpected', () => {
    for (const error of [new Error('in.csv: rejected: no header row'), Object.assign(new Error('no import x in Redis'), { code: 'IMPORT_NOT_FOUND' }), new Error('oom command not allowed')]) {
      const report = exitReportFor(error, ['status']);
      expect(report.code).toBe(1);
      expect(report.message).toContain('    at ');
    }
  });

  it('has an exit for every code, and every exit named is a documented one', () => {
    expect(Object.keys(EXIT_OF_CODE).sort()).toEqual(Object.keys(ERROR_CODES).sort());
    for (const exit of Object.values(EXIT_OF_CODE)) if (exit !== 'unexpected') expect(Object.keys(EXIT_CODES)).toContain(exit);
  });
});
