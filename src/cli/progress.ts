import type { ImportStatus } from '../import/status.js';

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

/** Progress of an import: settled rows of the total, rows/s and ETA. */
export function createProgress(stream: NodeJS.WriteStream, plainEveryMs = 5_000) {
  const bar = createBar(stream, plainEveryMs);
  return {
    update(status: ImportStatus, now = Date.now()): void {
      const total = status.total;
      const done = status.settledRows;
      const rate = status.rowsPerSecond;
      const eta = total !== undefined && rate > 0 ? Math.max(0, Math.round((total - done) / rate)) : undefined;
      const text = `${done.toLocaleString('en')}/${total === undefined ? '…' : total.toLocaleString('en')} rows  ${rate.toFixed(0)} rows/s  ETA ${eta === undefined ? '…' : formatSeconds(eta)}`;
      bar.draw(total ? done / total : undefined, text, status.settled, now);
    },
    end: () => bar.end(),
  };
}

export function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m}m${String(seconds % 60).padStart(2, '0')}s` : `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}
