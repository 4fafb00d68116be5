import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pauseInbox, resumeInbox } from '../../src/import/runState.js';
import { startWatcher } from '../../src/watch/inbox.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  await pipeline?.close();
  pipeline = undefined;
});

const lines = (text: string, message: string): number => text.split('\n').filter((line) => line.includes(message)).length;

describe('the inbox paused', () => {
  it('leaves new files in the inbox while paused, says so once, and takes them once resumed', async () => {
    pipeline = await startPipeline();
    const p = pipeline;
    const { redis, store } = p.runtime;
    await pauseInbox(redis, store.keys);
    // A long poll: the passes below are the test's own.
    const watcher = await startWatcher({ runtime: p.runtime, pollMs: 60_000, settleMs: 0 });
    p.runtime.adopt(() => watcher.close());
    const file = path.join(p.dataDir, 'inbox', 'customers', 'later.csv');
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, 'FirstName,LastName,EmailAddress\nPaula,Pause,paula@example.com\n');
    // Several passes, more than a file needs to be taken when the inbox runs.
    for (let i = 0; i < 4; i++) await watcher.scan();
    expect(existsSync(file)).toBe(true);
    expect(await store.listImportIds()).toEqual([]);
    expect(lines(p.logs(), 'inbox paused: new files stay in the inbox')).toBe(1);

    await resumeInbox(redis, store.keys);
    await until(async () => {
      await watcher.scan();
      return existsSync(path.join(p.dataDir, 'done', 'later.csv')) || undefined;
    }, 'the file to be imported once the inbox runs again');
    expect(lines(p.logs(), 'inbox resumed: taking files again')).toBe(1);
    expect(p.sandbox.store.customers().filter((c) => c.EmailAddress === 'paula@example.com')).toHaveLength(1);
  });
});
