/**
 * `subsync history` and `subsync find`, the built CLI against real Redis and
 * the sandbox: one JSON object per line, filters, and a card number that is
 * never searched and never printed.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { importAndFinish, SIGNUPS_CSV } from '../support/imports.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { envOf, startPipeline, type Pipeline } from '../support/pipeline.js';

beforeAll(requireBuiltCli);

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

const HistoryLineSchema = z.object({
  importId: z.string(),
  file: z.string(),
  kind: z.string(),
  state: z.string(),
  total: z.number().nullable(),
  settled: z.number(),
  counts: z.record(z.string(), z.number()),
  rowsPerSecond: z.number(),
  etaSeconds: z.number().nullable(),
});
const FindLineSchema = z.object({ importId: z.string(), row: z.number(), status: z.string(), file: z.string(), email: z.string(), customerId: z.string(), matched: z.string() });

const lines = (text: string): unknown[] => text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as unknown);

async function run(p: Pipeline, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = subsync(args, envOf(p));
  const { code } = await child.exited;
  return { code, stdout: child.stdout(), stderr: child.stderr() };
}

describe('history and find on the command line', () => {
  it('lists imports one JSON object a line, by state; finds rows by email and CustomerID; never searches or prints a card number', { timeout: 60_000 }, async () => {
    pipeline = await startPipeline();
    const clean = await importAndFinish(pipeline, await pipeline.file('people.csv', 'FirstName,LastName,EmailAddress\nAna,Silva,ana@example.com\nBo,Berg,bo@example.com\n'));
    const signups = await importAndFinish(pipeline, await pipeline.file('signups.csv', SIGNUPS_CSV));

    const all = await run(pipeline, ['history', '--json']);
    expect(all.code).toBe(0);
    const entries = lines(all.stdout).map((l) => HistoryLineSchema.parse(l));
    expect(entries.map((e) => [e.importId, e.state, e.settled, e.total])).toEqual([
      [signups.importId, 'finished with failures', 4, 4],
      [clean.importId, 'finished', 2, 2],
    ]);
    expect(entries[1]?.counts.created).toBe(2);

    const finished = await run(pipeline, ['history', '--json', '--state', 'finished']);
    expect(lines(finished.stdout).map((l) => HistoryLineSchema.parse(l).importId)).toEqual([clean.importId]);
    const page = await run(pipeline, ['history', '--limit', '1']);
    expect(page.stdout).toContain(signups.importId);
    expect(page.stdout).not.toContain(clean.importId);
    expect(page.stdout).toContain('more: subsync history --offset 1 --limit 1');

    const badState = await run(pipeline, ['history', '--state', 'done']);
    expect(badState.code).toBe(EXIT_CODES.usage);
    expect(badState.stderr).toContain('"finished with failures"');

    const byEmail = await run(pipeline, ['find', 'ANA@example.com', '--json']);
    expect(byEmail.code).toBe(0);
    const [ana, ...others] = lines(byEmail.stdout).map((l) => FindLineSchema.parse(l));
    expect(others).toEqual([]);
    expect(ana).toMatchObject({ importId: clean.importId, row: 1, status: 'created', file: 'people.csv', email: 'ana@example.com', matched: 'email' });
    const byId = await run(pipeline, ['find', ana?.customerId ?? '?', '--json']);
    expect(lines(byId.stdout).map((l) => FindLineSchema.parse(l)).map((h) => [h.importId, h.row, h.matched])).toEqual([[clean.importId, 1, 'customerId']]);

    const text = await run(pipeline, ['find', 'Kenta Yamamoto']);
    expect(text.stdout).toMatch(new RegExp(`^${signups.importId}  row 4  failed  signups.csv  Kenta Yamamoto  kenta@example.jp  \\(matched name\\)\\n$`));

    const card = await run(pipeline, ['find', '4111111111111111', '--json']);
    expect(card.code).toBe(0);
    expect(card.stdout).toBe('');
    expect(card.stderr).toContain('"************1111" looks like a card number: card data is never searched');
    expect(card.stderr).not.toContain('4111111111111111');

    const none = await run(pipeline, ['find', 'nobody@example.com']);
    expect(none.stdout).toBe('');
    expect(none.stderr).toContain('no rows match "nobody@example.com" in 2 import(s)');
  });
});
