import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { personAt } from '../../src/sandbox/population.js';
import { SEED_PAYMENT_METHOD_KEYS } from '../../src/sandbox/seed.js';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';

beforeAll(requireBuiltCli);
// A test that failed half-way must not leave a server running.
afterEach(killAll);

describe('subsync sandbox --seed-customers', () => {
  it('starts with that many population customers from the given seed, and says so', async () => {
    const run = subsync(['sandbox', '--port', '0', '--seed-customers', '2500', '--seed', '9']);
    const [, url] = await waitForOutput(run, /listening on (http:\/\/\S+)/);
    await waitForOutput(run, /customers: 2505 \(2500 seeded from population 9 in [\d.]+ s\)/);

    const stats = z.object({ customers: z.number() }).parse(await (await fetch(`${url}/_sandbox/stats`)).json());
    expect(stats.customers).toBe(SEED_PAYMENT_METHOD_KEYS.length + 2_500);
    const last = personAt(9, 2_499);
    const found = await fetch(`${url}/json/customers/${100_001 + SEED_PAYMENT_METHOD_KEYS.length + 2_499}`);
    expect(z.object({ Customer: z.object({ EmailAddress: z.string() }) }).parse(await found.json()).Customer.EmailAddress).toBe(last.EmailAddress);

    run.child.kill('SIGTERM');
    expect((await run.exited).code).toBe(0);
  });

  it('refuses a count that is not a whole number', async () => {
    const run = subsync(['sandbox', '--seed-customers', 'many']);
    expect((await run.exited).code).toBe(64);
    expect(run.stderr()).toContain('--seed-customers');
  });
});

describe('subsync sandbox --echo-card-data', () => {
  it('refuses card requests quoting their card, as told on the command line', async () => {
    const run = subsync(['sandbox', '--port', '0', '--echo-card-data', '1', '--echo-card-data-status', '502']);
    const [, url] = await waitForOutput(run, /listening on (http:\/\/\S+)/);
    await waitForOutput(run, /echo-card-data rate 1 \(status 502\)/);
    const faults = z.object({ echoCardData: z.number(), echoCardDataStatus: z.number() }).parse(await (await fetch(`${url}/_sandbox/faults`)).json());
    expect(faults).toEqual({ ...faults, echoCardData: 1, echoCardDataStatus: 502 });
    run.child.kill('SIGTERM');
    expect((await run.exited).code).toBe(0);
  });

  it('refuses a status that is not an HTTP error', async () => {
    const run = subsync(['sandbox', '--echo-card-data-status', '200']);
    expect((await run.exited).code).toBe(64);
    expect(run.stderr()).toContain('--echo-card-data-status');
  });
});
