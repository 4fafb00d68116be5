/**
 * `cancel`, `pause`, `resume`, `inbox` and `import --canary … --wait`: the
 * built CLI against real Redis and the sandbox, with --json and exit codes.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { importFile } from '../../src/import/producer.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { envOf, startPipeline, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

const lines = (text: string): unknown[] => text.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line) as unknown);

describe('cancel, pause and resume on the command line', () => {
  it('pause, resume and cancel --json each print one object; a cancelled import cannot resume (64); an unknown one is 66', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const { store, queues, keyring, logger, redis } = pipeline.runtime;
    const result = await importFile({ file: await pipeline.file('idle.csv', 'FirstName,LastName\nAna,Idle\nBen,Idle\nCem,Idle\n') }, { store, queues, keyring, logger, redis });
    const id = result.importId;
    const env = envOf(pipeline);

    const pause = subsync(['pause', id, '--json'], env);
    expect((await pause.exited).code).toBe(0);
    expect(lines(pause.stdout())).toEqual([{ importId: id, before: 'running', state: 'paused', changed: true }]);

    const status = subsync(['status', id, '--json'], env);
    expect((await status.exited).code).toBe(0);
    expect(lines(status.stdout())[0]).toMatchObject({ importId: id, runState: 'paused', runReason: 'paused by the operator' });

    const resume = subsync(['resume', id, '--json'], env);
    expect((await resume.exited).code).toBe(0);
    expect(lines(resume.stdout())[0]).toMatchObject({ importId: id, before: 'paused', state: 'running', changed: true });

    const cancel = subsync(['cancel', id], env);
    expect((await cancel.exited).code).toBe(0);
    expect(cancel.stdout()).toContain(`cancelled import ${id}: 3 row(s) never sent settled as cancelled`);

    const again = subsync(['cancel', id, '--json'], env);
    expect((await again.exited).code).toBe(0);
    // No worker ran, so the results are not written and the run state is still cancelling; every row has its outcome.
    expect(lines(again.stdout())).toEqual([{ importId: id, before: 'cancelling', state: 'cancelled', cancelled: 0, inFlight: 0 }]);

    const refused = subsync(['resume', id], env);
    expect((await refused.exited).code).toBe(EXIT_CODES.usage);
    const told = refused.stderr().split('\n').filter((l) => l.startsWith('subsync:'));
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(/^subsync: import \w+ is cancelling and cannot run on; import its unprocessed\.csv/);
    expect(refused.stdout()).toBe('');

    // Each action is in the audit trail, with who did it.
    const audit = subsync(['audit', '--json'], { ...env, SUBSYNC_ACTOR: 'runbook' });
    expect((await audit.exited).code).toBe(0);
    const actions = lines(audit.stdout()).map((e) => z.object({ action: z.string(), target: z.string(), actor: z.string() }).passthrough().parse(e)).filter((e) => e.target === id);
    expect(actions.map((e) => e.action).sort()).toEqual(['cancel', 'cancel', 'pause', 'resume']);
    const missing = subsync(['cancel', 'no-such-import', '--json'], env);
    expect((await missing.exited).code).toBe(EXIT_CODES.notFound);
    expect(missing.stdout()).toBe('');
  }, 60_000);

  it('inbox pause, status and resume --json', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const env = envOf(pipeline);
    const pause = subsync(['inbox', 'pause', '--json'], env);
    expect((await pause.exited).code).toBe(0);
    expect(lines(pause.stdout())[0]).toMatchObject({ inbox: 'paused', changed: true });
    const status = subsync(['inbox', 'status'], env);
    expect((await status.exited).code).toBe(0);
    expect(status.stdout()).toMatch(/^the inbox is paused since \d{4}-/);
    const resume = subsync(['inbox', 'resume', '--json'], env);
    expect((await resume.exited).code).toBe(0);
    expect(lines(resume.stdout())[0]).toEqual({ inbox: 'running', pausedAt: null, changed: true });
  }, 60_000);

  it('import --canary --wait stops with exit 4 when the canary pauses the import, saying why and how to go on', async () => {
    pipeline = await startPipeline({ seed: false });
    const rows = ['Ana,One,ana@example.com', 'Bad,Two,not-an-email', 'Cem,Three,cem@example.com', 'Dan,Four,dan@example.com', 'Eve,Five,eve@example.com', 'Fay,Six,fay@example.com'];
    const file = await pipeline.file('canary.csv', `FirstName,LastName,EmailAddress\n${rows.join('\n')}\n`);
    const run = subsync(['import', file, '--canary', '3', '--canary-max-failures', '0', '--wait'], envOf(pipeline));
    expect((await run.exited).code).toBe(EXIT_CODES.paused);
    expect(run.stdout()).toContain('canary: the first 3 rows run first; the rest waits until they have settled, and the import pauses itself if more than 0 of them do not succeed');
    const told = run.stderr().split('\n').filter((l) => l.startsWith('subsync:'));
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(/^subsync: import \w+ is paused: canary: 1 of the first 3 rows did not succeed \(more than 0 allowed\); `subsync resume \w+` runs the rest/);
    // Rows 4 to 6 were held back: not sent.
    expect(pipeline.sandbox.store.customers().map((c) => c.EmailAddress).sort()).toEqual(['ana@example.com', 'cem@example.com']);
  }, 90_000);

  it('--canary-max-failures takes a count or a percentage; anything else is bad usage', async () => {
    pipeline = await startPipeline({ workers: false, seed: false });
    const file = await pipeline.file('x.csv', 'FirstName,LastName\nAna,One\n');
    const bad = subsync(['import', file, '--canary', '10', '--canary-max-failures', 'many'], envOf(pipeline));
    expect((await bad.exited).code).toBe(EXIT_CODES.usage);
    expect(bad.stderr()).toContain('expected a count of rows (0 or more) or a percentage such as 10%');
  }, 60_000);
});
