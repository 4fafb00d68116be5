import { afterEach, describe, expect, it } from 'vitest';
import { importFile } from '../../src/import/producer.js';
import { importStatus } from '../../src/import/status.js';
import { customerInput } from '../support/bodies.js';
import { logSearches } from '../support/exports.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

describe('without an index, a search by name', () => {
  it('is read once per import and shared, by the more selective of the two names, as the service counts them', async () => {
    pipeline = await startPipeline({ seedCustomers: 2_000 });
    // 300 customers named Common: three pages; their first names are rare.
    for (let i = 0; i < 300; i++) pipeline.sandbox.store.createCustomer(customerInput({ FirstName: `Rare${i}`, LastName: 'Common', EmailAddress: `common${i}@example.com` }));
    const lines = ['FirstName,LastName,EmailAddress'];
    for (let i = 0; i < 8; i++) lines.push(`Unique${i}x,Common,new${i}@example.com`);
    // And one who exists already: found in the shared search of "Common"… or of its own first name, whichever is smaller.
    lines.push('Rare7,Common,common7@example.com');
    pipeline.sandbox.resetStats();
    const searches = logSearches(pipeline.sandbox);
    const result = await importFile({ file: await pipeline.file('names.csv', lines.join('\n')) }, { store: pipeline.runtime.store, queues: pipeline.runtime.queues, keyring: pipeline.runtime.keyring, logger: pipeline.runtime.logger });
    if (result.outcome !== 'enqueued') throw new Error(result.outcome);
    const status = await until(async () => {
      if (!pipeline) return undefined;
      const s = await importStatus(pipeline.runtime.store, result.importId);
      return s?.finished ? s : undefined;
    }, 'the import to finish');
    expect(status.counts).toMatchObject({ created: 8, exists: 1 });
    const { seen } = searches;
    // The size of the base (too big to page for 9 rows), then the first page of each distinct name once.
    expect(seen.filter((q) => q.contains === '')).toHaveLength(1);
    const common = seen.filter((q) => q.contains === 'Common');
    expect(common.map((q) => q.skip)).toEqual([0]);
    for (let i = 0; i < 8; i++) expect(seen.filter((q) => q.contains === `Unique${i}x`)).toHaveLength(1);
    expect(pipeline.sandbox.stats().byEndpoint).toEqual({ searchCustomers: seen.length, createCustomer: 8 });
    expect(seen.length).toBeLessThanOrEqual(1 + 1 + 8 + 1);
  });
});
