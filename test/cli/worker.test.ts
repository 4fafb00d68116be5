/**
 * `subsync worker` on a Redis that persists nothing: refused before anything
 * runs, one line naming the setting and the override, exit 69; with the
 * override it runs.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EXIT_CODES } from '../../src/cli/exitCodes.js';
import { killAll, requireBuiltCli, subsync, waitForOutput } from '../support/cli.js';
import { startOwnRedis, type OwnRedis } from '../support/redisServer.js';

beforeAll(requireBuiltCli);

let redis: OwnRedis | undefined;
afterEach(async () => {
  await killAll();
  await redis?.stop();
  redis = undefined;
});

describe('subsync worker on a Redis that persists nothing', () => {
  it('refuses it in one line (exit 69), and runs with SUBSYNC_REDIS_ACCEPT_LOSS=true', async () => {
    redis = await startOwnRedis();
    const env = { REDIS_URL: redis.url, SUBSYNC_QUEUE_PREFIX: 'refuse-test', SUBSYNC_API_URL: 'http://127.0.0.1:9', SUBSYNC_LOG_LEVEL: 'warn' };
    const refused = subsync(['worker'], env);
    const { code } = await refused.exited;
    expect(code).toBe(EXIT_CODES.unavailable);
    expect(refused.stderr().trim().split('\n')).toHaveLength(1);
    expect(refused.stderr()).toMatch(/persists nothing \(appendonly no, save ""\).*appendonly yes with appendfsync always.*SUBSYNC_REDIS_ACCEPT_LOSS=true/);
    expect(refused.stdout()).toBe('');

    const accepted = subsync(['worker'], { ...env, SUBSYNC_REDIS_ACCEPT_LOSS: 'true' });
    await waitForOutput(accepted, /worker running/);
    // Still told, as a warning.
    expect(accepted.stderr()).toMatch(/persists nothing/);
    accepted.child.kill('SIGTERM');
    expect((await accepted.exited).code).toBe(0);
  }, 30_000);
});
