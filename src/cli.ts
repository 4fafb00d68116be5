/**
 * The `subsync` command line: assembles one module per command from src/cli/
 * (each declares its flags and calls one function) and maps whatever they
 * throw to an exit code in src/cli/exitCodes.ts. `bin/subsync.js` imports the
 * compiled form of this file.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { z } from 'zod';
import { CONFIG_VARIABLES } from './config.js';
import { packageRoot } from './paths.js';
import { register as registerCancel } from './cli/cancel.js';
import { register as registerAudit } from './cli/audit.js';
import { register as registerDashboard } from './cli/dashboard.js';
import { register as registerDemo } from './cli/demo.js';
import { register as registerErrors } from './cli/errors.js';
import { exitReportFor } from './cli/exitCodes.js';
import { register as registerExport } from './cli/export.js';
import { register as registerFind } from './cli/find.js';
import { register as registerHistory } from './cli/history.js';
import { register as registerImport } from './cli/import.js';
import { register as registerIndex } from './cli/customerIndex.js';
import { register as registerInbox } from './cli/inbox.js';
import { register as registerPause } from './cli/pause.js';
import { register as registerRetry } from './cli/retry.js';
import { register as registerSandbox } from './cli/sandbox.js';
import { register as registerSchedule } from './cli/schedule.js';
import { register as registerStart } from './cli/start.js';
import { register as registerStatus } from './cli/status.js';
import { register as registerWatch } from './cli/watch.js';
import { register as registerWorker } from './cli/worker.js';

/** After a command returns, anything still open gets this long before the process exits anyway. */
const EXIT_GRACE_MS = 5_000;

const PackageJsonSchema = z.object({ name: z.string(), version: z.string() });

/** The version in package.json. */
function packageVersion(): string {
  const pkg = PackageJsonSchema.safeParse(JSON.parse(readFileSync(path.join(packageRoot(), 'package.json'), 'utf8')));
  return pkg.success ? pkg.data.version : '0.0.0-unknown';
}

/** The `--help` epilogue: every environment variable with its default. */
function environmentHelp(): string {
  const width = Math.max(...CONFIG_VARIABLES.map(({ name }) => name.length)) + 2;
  const lines = CONFIG_VARIABLES.map(
    (v) => `  ${v.name.padEnd(width)}${v.description}${v.default === undefined ? '' : ` (default: ${v.default})`}`,
  );
  return `\nEnvironment (flags override it; an empty value counts as unset):\n${lines.join('\n')}\n`;
}

/** Builds the program with every command registered. */
function buildProgram(): Command {
  const program = new Command('subsync');
  program
    .description('Batch import/sync worker: CSV files of customers, sign-ups and card updates into the Customer, Offer and Subscription service.')
    .version(packageVersion())
    // Throw instead of exiting, so exit codes are decided in one place; set
    // before the commands are added, which inherit it.
    .exitOverride()
    .showHelpAfterError('(run subsync --help for usage)')
    .addHelpText('after', environmentHelp());

  registerDemo(program);
  registerImport(program);
  registerWorker(program);
  registerWatch(program);
  registerStart(program);
  registerStatus(program);
  registerHistory(program);
  registerFind(program);
  registerIndex(program);
  registerErrors(program);
  registerRetry(program);
  registerCancel(program);
  registerPause(program);
  registerInbox(program);
  registerAudit(program);
  registerDashboard(program);
  registerExport(program);
  registerSchedule(program);
  registerSandbox(program);
  return program;
}

async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
    process.exitCode = 0;
  } catch (err: unknown) {
    const report = exitReportFor(err);
    if (report.message !== undefined) process.stderr.write(`${report.message}\n`);
    process.exitCode = report.code;
  }
  // Every command closes what it opened, so the process normally ends here by
  // itself; this unref'd timer only fires if something was left open.
  setTimeout(() => {
    process.stderr.write(`subsync: still running ${EXIT_GRACE_MS} ms after the command finished (a handle left open); exiting\n`);
    process.exit();
  }, EXIT_GRACE_MS).unref();
}

await main(process.argv);
