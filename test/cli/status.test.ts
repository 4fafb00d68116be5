/**
 * `status IMPORT_ID` sweeps the import it is asked about, and `import --wait`
 * with no worker running stops with one line saying what to start (exit 75):
 * the built CLI against real Redis.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { importFile } from '../../src/import/producer.js';
import { batchJobId, getRowJob } from '../../src/queue/queues.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { envOf, startPipeline, type Pipeline, releaseBacklog } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

describe('status and import --wait when rows are stuck', () => {
  it('status IMPORT_ID queues again the rows whose jobs are gone, and says so', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues, keyring, logger } = pipeline.runtime;
    const result = await importFile({ file: await pipeline.file('stuck.csv', 'FirstName,LastName\nAna,Stuck\nBen,Stuck\n') }, { store, queues, keyring, logger });
    await releaseBacklog(pipeline.runtime);
    await (await queues.rows.getJob(batchJobId(result.importId, 0)))?.remove();

    const run = subsync(['status', result.importId], envOf(pipeline));
    expect((await run.exited).code).toBe(0);
    expect(run.stdout()).toContain('2 row(s) had no job that would run them and were queued again');
    expect(run.stdout()).toContain('kept until finished');
    expect(await (await getRowJob(queues, result.importId, 1))?.getState()).toBe('waiting');
    expect(await (await getRowJob(queues, result.importId, 2))?.getState()).toBe('waiting');
  });

  it('import --wait with no worker running stops with one line and exit 75', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const file = await pipeline.file('nobody.csv', 'FirstName,LastName\nAna,Nobody\n');
    const run = subsync(['import', '--wait', file], envOf(pipeline));
    expect((await run.exited).code).toBe(EXIT_CODES.stalled);
    const told = run.stderr().split('\n').filter((l) => l.startsWith('subsync:'));
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(/^subsync: 1 row of import \w+ has no outcome, and no subsync worker is running .* start one .* nothing is lost/);
    expect(run.stderr()).not.toContain('    at ');
  }, 90_000);
});
