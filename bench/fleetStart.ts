/**
 * A fleet's start: `subsync worker` processes spawned at once, as a fleet
 * started with an import is, each timed from its spawn to "worker running",
 * with the CPU it has used by then (read from /proc). The bundled CLI, which
 * `bin/subsync.js` runs, beside the same code unbundled (dist/src/cli.js, what
 * `tsc` emits), in alternating rounds; medians over the workers of all rounds.
 * No row is imported: what is measured is the processes' loading, which three
 * fresh workers do side by side on the machine's cores.
 */
import path from 'node:path';
import { log, median, openBenchRuntime, processCpuMs, root, spawnCli, waitForLine, type BenchRow } from './support.js';

const unbundled = path.join(root, 'dist', 'src', 'cli.js');

interface Start {
  ms: number;
  cpuMs: number;
}

export async function fleetStart(workers: number, rounds: number): Promise<BenchRow[]> {
  const bench = await openBenchRuntime();
  try {
    // Any address: a worker does not call the service until it has a row.
    const env = { ...bench.env, SUBSYNC_API_URL: 'http://127.0.0.1:9' };
    const startFleet = async (entry: string | undefined): Promise<Start[]> => {
      const started = performance.now();
      const fleet = Array.from({ length: workers }, () => spawnCli(['worker'], env, { entry }));
      try {
        return await Promise.all(
          fleet.map(async (worker) => {
            await waitForLine(worker, /worker running/, 60_000);
            const ms = performance.now() - started;
            return { ms, cpuMs: await processCpuMs(worker.child.pid) };
          }),
        );
      } finally {
        for (const worker of fleet) worker.child.kill('SIGTERM');
        await Promise.all(fleet.map((worker) => worker.exited));
      }
    };
    const bundled: Start[] = [];
    const plain: Start[] = [];
    for (let round = 0; round < rounds; round++) {
      bundled.push(...(await startFleet(undefined)));
      plain.push(...(await startFleet(unbundled)));
      log(`fleet start round ${round + 1}: bundled ${bundled.slice(-workers).map((s) => s.ms.toFixed(0)).join('/')} ms, unbundled ${plain.slice(-workers).map((s) => s.ms.toFixed(0)).join('/')} ms`);
    }
    const range = (values: number[]): string => `${Math.min(...values).toFixed(0)}–${Math.max(...values).toFixed(0)}`;
    const note = (what: (s: Start) => number): string =>
      `${workers} workers spawned at once, ${rounds} rounds; bundled ${range(bundled.map(what))}, unbundled ${range(plain.map(what))}`;
    return [
      { figure: `fleet start: spawn to "worker running", median ms`, subsync: median(bundled.map((s) => s.ms)), baseline: median(plain.map((s) => s.ms)), baselineLabel: 'unbundled (dist/src/cli.js)', note: note((s) => s.ms) },
      { figure: 'fleet start: CPU a worker by then, median ms', subsync: median(bundled.map((s) => s.cpuMs)), baseline: median(plain.map((s) => s.cpuMs)), baselineLabel: 'unbundled (dist/src/cli.js)', note: note((s) => s.cpuMs) },
    ];
  } finally {
    await bench.close();
  }
}
