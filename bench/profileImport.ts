/**
 * Not part of `npm run bench`: a CPU profile of one `subsync worker`
 * (concurrency 32) during an import of ROWS customers against a sandbox in
 * its own process (as the bench runs it, so the worker, not the sandbox, is
 * what is busy), then the top functions by self time. For finding what
 * bounds import throughput.
 *
 *   node dist/bench/profileImport.js [ROWS=5000] [OUT_DIR=/tmp/subsync-prof]
 */
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { importFile } from '../src/import/producer.js';
import { writeCustomersCsv } from './make-customers.js';
import { openBenchRuntime, processCpuMs, spawnCli, spawnSandbox, waitFinished } from './support.js';

interface ProfileNode { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] }

const rows = Number(process.argv[2] ?? 5000);

const outDir = process.argv[3] ?? path.join(os.tmpdir(), 'subsync-prof');
await rm(outDir, { recursive: true, force: true });
await mkdir(outDir, { recursive: true });
const file = path.join(outDir, 'customers.csv');
await writeCustomersCsv(file, rows);
const sandbox = await spawnSandbox();
const bench = await openBenchRuntime({ apiUrl: sandbox.url });
const worker = spawnCli(['worker', '--concurrency', '32'], { ...bench.env, SUBSYNC_API_URL: sandbox.url }, { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${outDir}`] });
try {
  await new Promise((r) => setTimeout(r, 1500));
  const cpuBefore = await processCpuMs(worker.child.pid);
  const started = performance.now();
  const result = await importFile({ file, kind: 'customers' }, { store: bench.runtime.store, queues: bench.runtime.queues, keyring: undefined, logger: bench.runtime.logger });
  if (result.outcome !== 'enqueued') throw new Error(result.outcome);
  await waitFinished(bench.runtime, result.importId, 600_000);
  const cpu = (await processCpuMs(worker.child.pid)) - cpuBefore;
  console.log(`worker CPU (utime+stime): ${cpu.toFixed(0)} ms, ${((1000 * cpu) / rows).toFixed(0)} µs per row`);
  console.log(`${rows} rows in ${((performance.now() - started) / 1000).toFixed(1)} s (${(rows / ((performance.now() - started) / 1000)).toFixed(0)} rows/s), worker out of process`);
} finally {
  worker.child.kill('SIGTERM');
  await worker.exited;
  await bench.close();
  await sandbox.close();
}
const name = (await readdir(outDir)).find((f) => f.endsWith('.cpuprofile'));
if (!name) throw new Error('no profile written');
const profile = JSON.parse(await readFile(path.join(outDir, name), 'utf8')) as Profile;
const self = new Map<number, number>();
profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const byFn = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
for (const node of profile.nodes) {
  const t = self.get(node.id) ?? 0;
  total += t;
  const url = node.callFrame.url.replace(/^file:\/\//, '').replace(/.*node_modules\//, 'nm/').replace(/.*\/dist\//, 'dist/');
  const key = `${node.callFrame.functionName || '(anonymous)'} ${url}:${node.callFrame.lineNumber + 1}`;
  byFn.set(key, (byFn.get(key) ?? 0) + t);
  const pkg = url.startsWith('nm/') ? url.split('/').slice(0, url.startsWith('nm/@') ? 3 : 2).join('/') : url.startsWith('dist/') ? url : url || node.callFrame.functionName;
  byFile.set(pkg, (byFile.get(pkg) ?? 0) + t);
}
const top = (m: Map<string, number>, n: number): void => {
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n)) console.log(`${((100 * v) / total).toFixed(1).padStart(5)}%  ${(v / 1000).toFixed(0).padStart(6)} ms  ${k}`);
};
const idle = byFn.get('(idle) :0') ?? 0;
console.log(`profile ${name}: ${(total / 1000).toFixed(0)} ms sampled, ${((total - idle) / 1000).toFixed(0)} ms busy: ${((total - idle) / rows).toFixed(0)} µs of worker CPU per row`);
console.log('top functions by self time:');
top(byFn, 25);
console.log('by package / file:');
top(byFile, 15);
