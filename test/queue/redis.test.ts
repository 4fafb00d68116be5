import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { RedisCheckError, checkRedis } from '../../src/queue/redis.js';

/** A port nothing listens on. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

async function withRedis(args: string[], body: (url: string) => Promise<void>): Promise<void> {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...args], { stdio: 'pipe' });
  try {
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const deadline = Date.now() + 10_000;
    while (!out.includes('Ready to accept connections')) {
      if (Date.now() > deadline) throw new Error(`redis-server did not start:\n${out}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await body(`redis://127.0.0.1:${port}`);
  } finally {
    child.kill('SIGTERM');
    await once(child, 'exit');
  }
}

describe('checkRedis', () => {
  it('refuses a Redis that evicts keys', async () => {
    await withRedis(['--maxmemory-policy', 'allkeys-lru', '--appendonly', 'yes', '--dir', '/tmp'], async (url) => {
      const error = await checkRedis(url).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RedisCheckError);
      expect(error).toMatchObject({ code: 'REDIS_EVICTION' });
      expect(String(error)).toMatch(/allkeys-lru.*noeviction/);
    });
  });

  it('warns when Redis persists nothing, and passes a suitable one', async () => {
    await withRedis(['--maxmemory-policy', 'noeviction', '--appendonly', 'no'], async (url) => {
      expect((await checkRedis(url)).join('\n')).toMatch(/persists nothing/);
    });
  });

  it('says in one line how to start Redis when none answers', async () => {
    const error = await checkRedis(`redis://127.0.0.1:${await freePort()}`, 500).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'REDIS_UNREACHABLE' });
    expect(String(error)).toMatch(/not reachable.*start one with: redis-server/);
    expect(String(error)).not.toContain('\n');
  });
});
