/**
 * Graceful shutdown on SIGINT / SIGTERM, shared by every long-running command.
 */

const SIGNAL_EXIT_CODES: Record<'SIGINT' | 'SIGTERM', number> = { SIGINT: 130, SIGTERM: 143 };

/** Why a long-running command stops: a signal, or (a process `subsync start` runs) its parent stopping or gone. */
export type ShutdownCause = 'SIGINT' | 'SIGTERM' | 'parent gone';

/**
 * Resolves on the first SIGINT or SIGTERM, so the command can close what it
 * opened (in reverse order) and return. A second signal while it is closing
 * exits at once, with 128 + the signal's number, for an operator who cannot wait.
 *
 * A process started with a channel to its parent (the watcher `subsync
 * start` runs) also stops when that channel closes: the parent closes it
 * to stop the process, and it closes by itself when the parent dies, even
 * killed outright, so no watcher outlives its `start`. The channel does not
 * keep the process alive.
 */
export function waitForShutdownSignal(): Promise<ShutdownCause> {
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
    if (process.channel) {
      process.channel.unref();
      process.once('disconnect', () => {
        received = true;
        resolve('parent gone');
      });
    }
  });
}
