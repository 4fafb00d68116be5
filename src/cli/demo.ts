/**
 * `subsync demo`: the in-process sandbox, a worker, the files in samples/, an
 * export; prints where the results are. Needs only Redis.
 */
import type { Command } from 'commander';

/** Declares `subsync demo`. */
export function register(program: Command): void {
  program
    .command('demo')
    .description('run the end-to-end demo against an in-process sandbox (so far: every API endpoint once)')
    .action(async () => {
      // Loaded on use, so `--help` and other commands do not load the demo's dependencies.
      const { runDemo } = await import('./demoRun.js');
      await runDemo();
    });
}
