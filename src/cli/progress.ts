import type { ImportStatus } from '../import/status.js';

/**
 * Progress of an import for a person: a redrawn bar with rows/s and ETA on a
 * TTY, a plain line every few seconds otherwise (logs, CI).
 */
export function createProgress(stream: NodeJS.WriteStream, plainEveryMs = 5_000) {
  const tty = stream.isTTY === true;
  let lastPlain = 0;
  let drawn = false;
  return {
    update(status: ImportStatus, now = Date.now()): void {
      const total = status.total;
      const done = status.settledRows;
      const rate = status.rowsPerSecond;
      const eta = total !== undefined && rate > 0 ? Math.max(0, Math.round((total - done) / rate)) : undefined;
      const text = `${done.toLocaleString('en')}/${total === undefined ? '…' : total.toLocaleString('en')} rows  ${rate.toFixed(0)} rows/s  ETA ${eta === undefined ? '…' : formatSeconds(eta)}`;
      if (tty) {
        const width = 30;
        const filled = total ? Math.round((done / total) * width) : 0;
        stream.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${text}\u001b[K`);
        drawn = true;
      } else if (now - lastPlain >= plainEveryMs || status.settled) {
        stream.write(`progress: ${text}\n`);
        lastPlain = now;
      }
    },
    end(): void {
      if (tty && drawn) stream.write('\n');
    },
  };
}

function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${seconds}s`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m}m${String(seconds % 60).padStart(2, '0')}s` : `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}
