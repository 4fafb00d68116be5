import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES, exitReportFor } from '../../src/cli/exitCodes.js';
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
