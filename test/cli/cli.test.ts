import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GetOfferResponseSchema } from '../../src/api/schemas/index.js';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';

beforeAll(requireBuiltCli);

// A test that failed half-way must not leave a server running.
afterEach(killAll);

describe('subsync --help', () => {
  it('lists the commands and the environment variables', async () => {
    const run = subsync(['--help']);
    const { code } = await run.exited;
    expect(code).toBe(0);
    const help = run.stdout();
    expect(help).toMatch(/Usage: subsync/);
    expect(help).toMatch(/^\s+sandbox\b/m);
    expect(help).toMatch(/^\s+demo\b/m);
    expect(help).toContain('SUBSYNC_API_URL');
    expect(help).toContain('REDIS_URL');
    expect(help).toContain('redis://127.0.0.1:6379');
  });

  it('prints the version from package.json', async () => {
    const run = subsync(['--version']);
    expect((await run.exited).code).toBe(0);
    expect(run.stdout().trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});

describe('exit codes', () => {
  it('exits 64 naming the flag for a bad flag value', async () => {
    const run = subsync(['sandbox', '--error-rate', '2']);
    expect((await run.exited).code).toBe(64);
    expect(run.stderr()).toContain('--error-rate');
  });

  it('exits 78 with every bad variable for an invalid environment, hiding the card key', async () => {
    const run = subsync(['sandbox', '--port', '0'], { SUBSYNC_RATE: 'abc', SUBSYNC_CARD_KEY: 'not-a-key' });
    expect((await run.exited).code).toBe(78);
    expect(run.stderr()).toContain('SUBSYNC_RATE="abc": expected a positive number of requests per second');
    expect(run.stderr()).toContain('SUBSYNC_CARD_KEY=(hidden)');
    expect(run.stderr()).not.toContain('not-a-key');
  });
});

describe('subsync sandbox', () => {
  it('listens on a free port, answers HTTP, and exits 0 on SIGTERM', async () => {
    const run = subsync(['sandbox', '--port', '0', '--latency', '5']);
    const [, url] = await waitForOutput(run, /listening on (http:\/\/\S+)/);
    expect(url).toBeDefined();
    await waitForOutput(run, /faults: latency 5 ms/);

    const unknown = await fetch(`${url}/json/offers/NO-SUCH-OFFER`);
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ Message: 'Offer NO-SUCH-OFFER was not found' });
    const offer = await fetch(`${url}/json/offers/STREAM-PLUS`);
    expect(GetOfferResponseSchema.parse(await offer.json()).Offer.Status).toBe('Active');

    run.child.kill('SIGTERM');
    const { code, signal } = await run.exited;
    expect({ code, signal }).toEqual({ code: 0, signal: null });
  });
});
