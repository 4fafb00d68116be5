import { expect } from 'vitest';
import { importFile, type ImportRequest } from '../../src/import/producer.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { until, type Pipeline } from './pipeline.js';

/**
 * Imports a file through the producer and waits until its results are
 * written. Update files may send passwords empty here (the sandbox's
 * customers have none); the refusal has tests of its own.
 */
export async function importAndFinish(pipeline: Pipeline, file: string, request: Partial<ImportRequest> = {}): Promise<ImportStatus> {
  const { store, queues, keyring, logger } = pipeline.runtime;
  const result = await importFile({ file, sendEmptyPasswords: true, ...request }, { store, queues, keyring, logger });
  expect(result.outcome).toBe('enqueued');
  return waitFinished(pipeline, result.importId);
}

/** Waits until an import's current round has written its results. */
export function waitFinished(pipeline: Pipeline, importId: string, check: (status: ImportStatus) => boolean = () => true): Promise<ImportStatus> {
  return until(async () => {
    const status = await importStatus(pipeline.runtime.store, importId);
    return status?.finished && check(status) ? status : undefined;
  }, `import ${importId} to finish`);
}

/** A sign-ups file: two good rows, one invalid email (row 2), one refused by the service (row 4, a retired offer). */
export const SIGNUPS_CSV = [
  'Customer.FirstName,Customer.LastName,Customer.EmailAddress,Customer.City,CreditCardInfo.AccountNumber,CreditCardInfo.ExpirationDate,CreditCardInfo.CVCode,Subscription.OfferCode',
  'Amélie,Poulain,amelie.poulain@example.fr,Paris,4111111111111111,1230,737,STREAM-PLUS',
  'Bob,Marley-Brown,bob@,Leeds,5555555555554444,1230,123,NEWS-ANNUAL',
  'Conor,O\'Sullivan,conor@example.ie,Cork,4000056655665556,0629,737,NEWS-ANNUAL',
  'Kenta,Yamamoto,kenta@example.jp,Tokyo,4111111111111111,1230,737,LEGACY-2019',
].join('\n');
