/**
 * Graceful shutdown on SIGINT / SIGTERM, shared by every long-running command.
 */

const SIGNAL_EXIT_CODES: Record<'SIGINT' | 'SIGTERM', number> = { SIGINT: 130, SIGTERM: 143 };

/**
 * Resolves on the first SIGINT or SIGTERM, so the command can close what it
 * opened (in reverse order) and return. A second signal while it is closing
 * exits at once, with 128 + the signal's number, for an operator who cannot wait.
 */
export function waitForShutdownSignal(): Promise<'SIGINT' | 'SIGTERM'> {
  return new Promise((resolve) => {
    let received = false;
    const onSignal = (signal: 'SIGINT' | 'SIGTERM'): void => {
      if (received) {
        process.stderr.write(`subsync: ${signal} again, exiting without finishing shutdown\n`);
        process.exit(SIGNAL_EXIT_CODES[signal]);
      }
      received = true;
      resolve(signal);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}
