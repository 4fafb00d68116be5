/**
 * The audit trail from the command line: `retry`, `retry --group` and
 * `schedule` changes are recorded with their actor (SUBSYNC_ACTOR, else
 * cli:<os user>); `subsync audit` prints them, `--json` one object a line.
 */
import { userInfo } from 'node:os';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { errorGroups } from '../../src/import/errorGroups.js';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { importAndFinish } from '../support/imports.js';
import { envOf, startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
beforeAll(requireBuiltCli);
afterEach(async () => {
  await killAll();
  await pipeline?.close();
  pipeline = undefined;
});

async function run(p: Pipeline, args: string[], extra: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = subsync(args, envOf(p, extra));
  const { code } = await child.exited;
  return { code, stdout: child.stdout(), stderr: child.stderr() };
}

const LineSchema = z.object({
  id: z.string(),
  actor: z.string(),
  action: z.string(),
  target: z.string(),
  at: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
  expiresAt: z.string(),
  retentionDays: z.number(),
});

describe('subsync audit', () => {
  it('records retry, retry --group and schedule changes with their actor, and prints them newest first', { timeout: 90_000 }, async () => {
    pipeline = await startPipeline();
    const p = pipeline;
    const status = await importAndFinish(p, await p.file('missing.csv', 'CustomerID,EmailAddress\n999991,a@example.com\n999992,b@example.com\n'));
    const id = status.importId;
    const group = (await errorGroups(p.runtime.store, id)).groups[0]?.code ?? '';
    expect(group).toMatch(/^failed:/);

    // A dry run sends nothing, and is not recorded.
    expect((await run(p, ['retry', id, '--group', group, '--dry-run'], { SUBSYNC_ACTOR: 'ci:nightly' })).code).toBe(0);
    expect((await run(p, ['retry', id, '--group', group], { SUBSYNC_ACTOR: 'ci:nightly' })).code).toBe(0);
    expect((await run(p, ['retry', id, '--row', '1'], { SUBSYNC_ACTOR: 'ci:nightly' })).code).toBe(0);
    expect((await run(p, ['schedule', 'export', '--cron', '0 2 * * *', '--tz', 'UTC'])).code).toBe(0);
    expect((await run(p, ['schedule', 'remove'])).code).toBe(0);

    const json = await run(p, ['audit', '--json', '--limit', '10']);
    expect(json.code).toBe(0);
    const lines = json.stdout.trim().split('\n').map((line) => LineSchema.parse(JSON.parse(line)));
    const me = `cli:${userInfo().username}`;
    expect(lines.map((l) => [l.actor, l.action, l.target])).toEqual([
      [me, 'schedule.remove', 'subsync-export'],
      [me, 'schedule.set', 'subsync-export'],
      ['ci:nightly', 'retry', id],
      ['ci:nightly', 'retry.group', id],
    ]);
    expect(lines[3]?.details).toMatchObject({ group, retried: [1, 2] });
    expect(lines[2]?.details).toMatchObject({ scope: 'row' });
    expect(lines[1]?.details).toMatchObject({ pattern: '0 2 * * *', tz: 'UTC', format: 'csv' });
    for (const line of lines) {
      expect(line.retentionDays).toBe(30);
      expect(Date.parse(line.expiresAt) - Date.parse(line.at)).toBe(30 * 24 * 3600 * 1000);
    }

    const text = await run(p, ['audit', '--limit', '2']);
    expect(text.code).toBe(0);
    const out = text.stdout.split('\n');
    expect(out[0]).toBe('audit trail: 4 entries, each kept 30 days (SUBSYNC_RETENTION_DAYS)');
    expect(out[1]).toMatch(new RegExp(`^\\d{4}-\\d{2}-\\d{2}T[\\d:.]+Z  ${me}  schedule\\.remove  subsync-export$`));
    expect(out[3]).toBe('(2 older: --offset 2)');

    const paged = await run(p, ['audit', '--json', '--offset', '3']);
    expect(paged.stdout.trim().split('\n').map((l) => LineSchema.parse(JSON.parse(l)).action)).toEqual(['retry.group']);
  });

  it('refuses a bad --limit with one line, exit 64', async () => {
    pipeline = await startPipeline({ workers: false });
    const bad = await run(pipeline, ['audit', '--limit', '0']);
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain("option '--limit <n>' argument '0' is invalid. expected a whole number from 1 to 100000");
  });
});
