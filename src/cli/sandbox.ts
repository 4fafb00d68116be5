/**
 * `subsync sandbox`: the in-memory service, with switchable
 * faults, for operators rehearsing and for trying subsync without the real
 * service. Runs until SIGINT / SIGTERM.
 */
import type { Command } from 'commander';
import { loadConfig } from '../config.js';
import { createLogger } from '../log.js';
import type { SandboxFaults } from '../sandbox/server.js';
import { parseErrorStatus, parseNonEmpty, parseNonNegativeInt, parsePort, parseProbability } from './options.js';
import { waitForShutdownSignal } from './signals.js';

/** The flags of `subsync sandbox`, as commander parses them. */
export interface SandboxFlags {
  port: number;
  host: string;
  latency: number;
  errorRate: number;
  errorAfterApplyRate: number;
  rateLimit: number;
  dropAfterCommit: number;
  echoCardData: number;
  echoCardDataStatus: number;
  auth?: string;
  seedCustomers: number;
  seed: number;
}

/** Declares `subsync sandbox` and its flags. */
export function register(program: Command): void {
  program
    .command('sandbox')
    .description('run the sandbox service (in memory, seeded offers and payment methods) until SIGINT/SIGTERM')
    .option('--port <n>', 'port to listen on (0 = any free port)', parsePort, 8787)
    .option('--host <host>', 'address to listen on', parseNonEmpty, '127.0.0.1')
    .option('--latency <ms>', 'delay added to every answer, in milliseconds', parseNonNegativeInt, 0)
    .option('--error-rate <p>', 'probability of a 5xx answer before the request is applied', parseProbability, 0)
    .option('--error-after-apply-rate <p>', 'probability of a 5xx answer after the request is applied', parseProbability, 0)
    .option('--rate-limit <rps>', 'requests per second before answering 429 with Retry-After (0 = no limit)', parseNonNegativeInt, 0)
    .option('--drop-after-commit <p>', 'probability of applying a change and then cutting the connection', parseProbability, 0)
    .option('--echo-card-data <p>', 'probability of refusing a sign-up or card update with a message quoting its card number and CVC', parseProbability, 0)
    .option('--echo-card-data-status <n>', 'the status of those refusals (400 to 599)', parseErrorStatus, 400)
    .option('--auth <value>', 'require this exact Authorization header value (default: none required)', parseNonEmpty)
    .option('--seed-customers <n>', 'customers of the generated population to start with (realistic names, for search at scale)', parseNonNegativeInt, 0)
    .option('--seed <s>', 'which generated population: the same seed, the same customers', parseNonNegativeInt, 1)
    .action((flags: SandboxFlags) => runSandbox(flags));
}

/** Starts the sandbox, prints its URL and faults, and closes it on the first SIGINT / SIGTERM. */
export async function runSandbox(flags: SandboxFlags): Promise<void> {
  const config = loadConfig();
  // stdout carries the human-readable lines; the JSON log goes to stderr.
  const logger = createLogger({ level: config.logLevel, destination: process.stderr });
  for (const warning of config.warnings) logger.warn(warning);

  const faults: SandboxFaults = {
    latencyMs: flags.latency,
    errorRate: flags.errorRate,
    errorAfterApplyRate: flags.errorAfterApplyRate,
    rateLimit: flags.rateLimit,
    dropAfterCommitRate: flags.dropAfterCommit,
    echoCardData: flags.echoCardData,
    echoCardDataStatus: flags.echoCardDataStatus,
  };
  // Listen for signals before starting, so a signal during start-up still closes the server.
  const signal = waitForShutdownSignal();
  // Loaded on use, so other commands do not load the sandbox.
  const { startSandbox } = await import('../sandbox/server.js');
  const startedAt = performance.now();
  const sandbox = await startSandbox({
    port: flags.port,
    host: flags.host,
    faults,
    auth: flags.auth,
    seed: true,
    seedCustomers: flags.seedCustomers,
    seedRandom: flags.seed,
    logger,
  });

  process.stdout.write(`sandbox listening on ${sandbox.url}\n`);
  const seconds = ((performance.now() - startedAt) / 1000).toFixed(1);
  process.stdout.write(`customers: ${sandbox.store.customerCount()} (${flags.seedCustomers} seeded from population ${flags.seed} in ${seconds} s)\n`);
  process.stdout.write(`faults: ${describeFaults(faults)}\n`);
  process.stdout.write(`auth: ${flags.auth === undefined ? 'none required' : 'Authorization header required (value not shown)'}\n`);

  const received = await signal;
  process.stdout.write(`${received}: closing the sandbox\n`);
  await sandbox.close();
}

/** One line describing the faults, e.g. `latency 5 ms, error rate 0, ...`. */
export function describeFaults(faults: SandboxFaults): string {
  return [
    `latency ${faults.latencyMs} ms`,
    `error rate ${faults.errorRate}`,
    `error-after-apply rate ${faults.errorAfterApplyRate}`,
    `rate limit ${faults.rateLimit === 0 ? 'none' : `${faults.rateLimit} req/s`}`,
    `drop-after-commit rate ${faults.dropAfterCommitRate}`,
    `echo-card-data rate ${faults.echoCardData} (status ${faults.echoCardDataStatus})`,
  ].join(', ');
}
