/** `subsync inbox pause|resume|status [--json]`: the watcher (`watch`, `start`) leaves new files in the inbox while paused. */
import type { Command } from 'commander';
import { inboxPausedSince, pauseInbox, resumeInbox } from '../import/runState.js';
import type { Runtime } from '../runtime.js';
import { withRuntime } from './context.js';

export function register(program: Command): void {
  const inbox = program.command('inbox').description('pause or resume taking files from the inbox (every watcher of this Redis)');
  inbox
    .command('pause')
    .description('watchers take no new file from the inbox until `subsync inbox resume` (imports already taken run on)')
    .option('--json', 'one JSON object instead of text')
    .action((flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const changed = await pauseInbox(runtime.redis, runtime.store.keys);
        await report(runtime, flags.json, changed, changed ? 'inbox paused: new files stay in the inbox until `subsync inbox resume`' : 'the inbox was already paused');
      }),
    );
  inbox
    .command('resume')
    .description('watchers take files from the inbox again')
    .option('--json', 'one JSON object instead of text')
    .action((flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const changed = await resumeInbox(runtime.redis, runtime.store.keys);
        await report(runtime, flags.json, changed, changed ? 'inbox resumed: files dropped meanwhile are taken at the next poll' : 'the inbox was not paused');
      }),
    );
  inbox
    .command('status')
    .description('whether the inbox is paused')
    .option('--json', 'one JSON object instead of text')
    .action((flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const since = await inboxPausedSince(runtime.redis, runtime.store.keys);
        await report(runtime, flags.json, false, since === undefined ? 'the inbox is running' : `the inbox is paused since ${new Date(since).toISOString()}`);
      }),
    );
}

async function report(runtime: Runtime, json: boolean | undefined, changed: boolean, text: string): Promise<void> {
  if (!json) {
    process.stdout.write(`${text}\n`);
    return;
  }
  const since = await inboxPausedSince(runtime.redis, runtime.store.keys);
  process.stdout.write(`${JSON.stringify({ inbox: since === undefined ? 'running' : 'paused', pausedAt: since === undefined ? null : new Date(since).toISOString(), changed })}\n`);
}
