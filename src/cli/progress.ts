import { formatSeconds, turnText, type ImportStatus } from '../import/status.js';

/**
 * A progress line for a person: a redrawn bar on a TTY, a plain line every
 * few seconds otherwise (logs, CI). `fraction` is how far along (undefined
 * while unknown), `text` what follows the bar, `final` forces a plain line.
 */
export function createBar(stream: NodeJS.WriteStream, plainEveryMs = 5_000) {
  const tty = stream.isTTY === true;
  let lastPlain = 0;
  let drawn = false;
  return {
    draw(fraction: number | undefined, text: string, final: boolean, now = Date.now()): void {
      if (tty) {
        const width = 30;
        const filled = fraction ? Math.round(Math.min(1, fraction) * width) : 0;
        stream.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${text}\u001b[K`);
        drawn = true;
      } else if (now - lastPlain >= plainEveryMs || final) {
        stream.write(`progress: ${text}\n`);
        lastPlain = now;
      }
    },
    end(): void {
      if (tty && drawn) stream.write('\n');
    },
  };
}

/** Progress of an import: settled rows of the total, its turn at the budget while it shares it, rows/s and ETA. */
export function createProgress(stream: NodeJS.WriteStream, plainEveryMs = 5_000) {
  const bar = createBar(stream, plainEveryMs);
  return {
    update(status: ImportStatus, now = Date.now()): void {
      const total = status.total;
      const done = status.settledRows;
      bar.draw(total ? done / total : undefined, progressText(status), status.settled, now);
    },
    end: () => bar.end(),
  };
}

/**
 * `120/5,000 rows  place 2 of 3 sharing the budget, share 33%  16 rows/s  ETA 5m05s`:
 * the turn while other imports share the budget, and the rate and ETA it gets
 * now (measured by the feeder), else from its average since it began.
 */
export function progressText(status: ImportStatus): string {
  const total = status.total;
  const done = status.settledRows;
  const schedule = status.schedule;
  const rate = schedule?.rowsPerSecond ?? status.rowsPerSecond;
  const eta = schedule ? schedule.etaSeconds : total !== undefined && rate > 0 ? Math.max(0, Math.round((total - done) / rate)) : undefined;
  return `${done.toLocaleString('en')}/${total === undefined ? '…' : total.toLocaleString('en')} rows${turnText(status)}  ${rate.toFixed(0)} rows/s  ETA ${eta === undefined ? '…' : formatSeconds(eta)}`;
}

export { formatSeconds, turnText } from '../import/status.js';
