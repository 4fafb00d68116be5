import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import type { Redis } from 'ioredis';

/** A port nothing listens on. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

/** A redis-server of the test's own, on a free port, that can be stopped and started again (empty: no persistence). */
export interface OwnRedis {
  url: string;
  port: number;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export async function startOwnRedis(args: string[] = ['--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction']): Promise<OwnRedis> {
  const port = await freePort();
  let child: ChildProcessWithoutNullStreams | undefined;
  const start = async (): Promise<void> => {
    const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', ...args], { stdio: 'pipe' });
    child = proc;
    let out = '';
    proc.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const deadline = Date.now() + 10_000;
    while (!out.includes('Ready to accept connections')) {
      if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`redis-server did not start:\n${out}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  const stop = async (): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null) return;
    proc.kill('SIGKILL');
    await once(proc, 'exit');
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async restart() {
      await stop();
      await start();
    },
    stop,
  };
}

/** Every key of one Redis node, sorted (SCAN, for a test's own small Redis). */
export async function allKeys(client: Redis): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  return keys.sort();
}
