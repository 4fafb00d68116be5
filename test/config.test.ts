import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, ConfigError, DEFAULT_FAILED_RETENTION_DAYS, DEFAULT_RETENTION_DAYS, DEFAULT_SETTLE_MS, SCHEMA_VARIABLES, loadConfig, requireApiUrl } from '../src/config.js';
import { DEFAULT_CONCURRENCY, HTTP_DEFAULTS, JOB_LOCK_MS } from '../src/policy.js';

const KEY_HEX = 'a1'.repeat(32);

/** Calls loadConfig expecting a ConfigError, and returns it. */
function configError(env: NodeJS.ProcessEnv): ConfigError {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    if (err instanceof ConfigError) return err;
  }
  throw new Error('loadConfig did not throw');
}

describe('loadConfig', () => {
  it('applies the defaults to an empty environment', () => {
    const config = loadConfig({});
    expect(config).toEqual({
      apiUrl: undefined,
      apiAuth: undefined,
      redisUrl: 'redis://127.0.0.1:6379',
      redisCluster: false,
      rate: undefined,
      concurrency: DEFAULT_CONCURRENCY,
      exportShare: 0.4,
      dataDir: path.resolve('./var'),
      csvBom: true,
      cardKey: undefined,
      cardKeyId: 'k1',
      dashboardToken: undefined,
      dashboardTokens: [],
      dashboardUrl: undefined,
      webhookUrl: undefined,
      webhookSecret: undefined,
      actor: undefined,
      dashboardHosts: [],
      inboxSettleMs: DEFAULT_SETTLE_MS,
      failedRetentionDays: DEFAULT_FAILED_RETENTION_DAYS,
      retentionDays: DEFAULT_RETENTION_DAYS,
      httpTimeoutMs: HTTP_DEFAULTS.requestTimeoutMs,
      jobLockMs: JOB_LOCK_MS,
      cardKeysPrevious: [],
      queuePrefix: 'subsync',
      logLevel: 'info',
      redisAcceptLoss: false,
      warnings: [],
    });
  });

  it('reads every variable', () => {
    const config = loadConfig({
      SUBSYNC_API_URL: 'https://api.example.com/base/',
      SUBSYNC_API_AUTH: 'Bearer abc',
      REDIS_URL: 'rediss://:secret@redis.example.com:6380/2',
      SUBSYNC_RATE: '12.5',
      SUBSYNC_CONCURRENCY: '4',
      SUBSYNC_DATA_DIR: '/tmp/subsync-data',
      SUBSYNC_CARD_KEY: KEY_HEX,
      SUBSYNC_CARD_KEY_ID: 'k2-2025',
      SUBSYNC_DASHBOARD_TOKEN: 'x'.repeat(16),
      SUBSYNC_DASHBOARD_HOSTS: 'Subsync.Internal, 10.0.0.5,[fd00::1]',
      SUBSYNC_INBOX_SETTLE_MS: '0',
      SUBSYNC_FAILED_RETENTION_DAYS: '7',
      SUBSYNC_RETENTION_DAYS: '90',
      SUBSYNC_HTTP_TIMEOUT_MS: '20000',
      SUBSYNC_QUEUE_PREFIX: '{subsync}',
      SUBSYNC_LOG_LEVEL: 'debug',
    });
    expect(config.apiUrl).toBe('https://api.example.com/base');
    expect(config.apiAuth).toBe('Bearer abc');
    expect(config.redisUrl).toBe('rediss://:secret@redis.example.com:6380/2');
    expect(config.rate).toBe(12.5);
    expect(config.concurrency).toBe(4);
    expect(config.dataDir).toBe('/tmp/subsync-data');
    expect(config.cardKey).toEqual(Buffer.from(KEY_HEX, 'hex'));
    expect(config.cardKey?.length).toBe(32);
    expect(config.cardKeyId).toBe('k2-2025');
    expect(config.dashboardToken).toBe('x'.repeat(16));
    expect(config.dashboardHosts).toEqual(['subsync.internal', '10.0.0.5', '[fd00::1]']);
    expect(config.inboxSettleMs).toBe(0);
    expect(config.failedRetentionDays).toBe(7);
    expect(config.retentionDays).toBe(90);
    expect(DEFAULT_RETENTION_DAYS).toBe(30);
    expect(config.httpTimeoutMs).toBe(20_000);
    expect(config.queuePrefix).toBe('{subsync}');
    expect(config.logLevel).toBe('debug');
  });

  it('reads named dashboard tokens with their roles, the webhook, the dashboard URL and the actor', () => {
    const config = loadConfig({
      SUBSYNC_DASHBOARD_TOKENS: 'vera:viewer:0123456789abcdef, otto:operator:with:colons:0123456789',
      SUBSYNC_WEBHOOK_URL: 'https://hooks.example/services/T0/B0/secretpath',
      SUBSYNC_WEBHOOK_SECRET: 's'.repeat(16),
      SUBSYNC_DASHBOARD_URL: 'https://subsync.internal:8080/',
      SUBSYNC_ACTOR: 'ci:nightly',
    });
    expect(config.dashboardTokens).toEqual([
      { name: 'vera', role: 'viewer', token: '0123456789abcdef' },
      { name: 'otto', role: 'operator', token: 'with:colons:0123456789' },
    ]);
    expect(config).toMatchObject({ webhookUrl: 'https://hooks.example/services/T0/B0/secretpath', dashboardUrl: 'https://subsync.internal:8080', actor: 'ci:nightly' });
  });

  it('refuses a named token called admin beside SUBSYNC_DASHBOARD_TOKEN (that one is the user admin), never echoing either', () => {
    const bad = () => loadConfig({ SUBSYNC_DASHBOARD_TOKEN: 't'.repeat(16), SUBSYNC_DASHBOARD_TOKENS: 'admin:viewer:0123456789abcdef' });
    expect(bad).toThrow(/SUBSYNC_DASHBOARD_TOKENS=\(hidden\)/);
    expect(bad).not.toThrow(/0123456789abcdef/);
    expect(loadConfig({ SUBSYNC_DASHBOARD_TOKENS: 'admin:viewer:0123456789abcdef' }).dashboardTokens[0]?.name).toBe('admin');
  });

  it('resolves a relative data dir to an absolute path', () => {
    expect(loadConfig({ SUBSYNC_DATA_DIR: 'data/here' }).dataDir).toBe(path.resolve('data/here'));
  });

  it('treats an empty string as unset', () => {
    const env = Object.fromEntries(CONFIG_VARIABLES.map(({ name }) => [name, '']));
    expect(loadConfig(env)).toEqual(loadConfig({}));
  });

  it.each([
    ['SUBSYNC_API_URL', 'ftp://example.com', 'http:// or https:// URL'],
    ['SUBSYNC_API_URL', 'not a url', 'http:// or https:// URL'],
    ['SUBSYNC_API_AUTH', 'Bearer a\r\nX-Injected: 1', 'one line'],
    ['REDIS_URL', 'http://127.0.0.1:6379', 'redis:// or rediss://'],
    ['REDIS_URL', 'localhost:6379', 'redis:// or rediss://'],
    ['SUBSYNC_RATE', 'abc', 'positive number of requests per second'],
    ['SUBSYNC_RATE', '0', 'positive number of requests per second'],
    ['SUBSYNC_RATE', '-3', 'positive number of requests per second'],
    ['SUBSYNC_RATE', 'Infinity', 'positive number of requests per second'],
    ['SUBSYNC_EXPORT_SHARE', '1', 'from 0.05 to 0.95'],
    ['SUBSYNC_EXPORT_SHARE', 'half', 'from 0.05 to 0.95'],
    ['SUBSYNC_CONCURRENCY', '0', 'positive whole number'],
    ['SUBSYNC_CONCURRENCY', '2.5', 'positive whole number'],
    ['SUBSYNC_CONCURRENCY', 'lots', 'positive whole number'],
    ['SUBSYNC_CARD_KEY', 'abc', '64 hexadecimal characters'],
    ['SUBSYNC_CARD_KEY', 'z'.repeat(64), '64 hexadecimal characters'],
    ['SUBSYNC_CARD_KEY', 'a'.repeat(63), '64 hexadecimal characters'],
    ['SUBSYNC_CARD_KEY_ID', 'has space', '1 to 32 characters'],
    ['SUBSYNC_CARD_KEY_ID', 'k'.repeat(33), '1 to 32 characters'],
    ['SUBSYNC_DASHBOARD_TOKEN', 'short', 'at least 16 characters'],
    ['SUBSYNC_DASHBOARD_TOKENS', 'alice:viewer:short', 'name:role:token'],
    ['SUBSYNC_DASHBOARD_TOKENS', 'alice:owner:0123456789abcdef', 'name:role:token'],
    ['SUBSYNC_DASHBOARD_TOKENS', 'alice:viewer:0123456789abcdef,alice:admin:fedcba9876543210', 'unique'],
    ['SUBSYNC_DASHBOARD_TOKENS', 'alice:viewer:0123456789abcdef,bob:admin:0123456789abcdef', 'each token different'],
    ['SUBSYNC_WEBHOOK_URL', 'ftp://hooks.example', 'http:// or https:// URL'],
    ['SUBSYNC_WEBHOOK_SECRET', 'short', 'at least 16 characters'],
    ['SUBSYNC_DASHBOARD_HOSTS', 'evil.example:8080', 'without ports'],
    ['SUBSYNC_DASHBOARD_HOSTS', 'a b', 'without ports'],
    ['SUBSYNC_DASHBOARD_HOSTS', ' , ', 'without ports'],
    ['SUBSYNC_INBOX_SETTLE_MS', '-1', 'whole number of milliseconds, 0 or more'],
    ['SUBSYNC_INBOX_SETTLE_MS', '5s', 'whole number of milliseconds, 0 or more'],
    ['SUBSYNC_FAILED_RETENTION_DAYS', '0', 'whole number of days, 1 or more'],
    ['SUBSYNC_FAILED_RETENTION_DAYS', '1.5', 'whole number of days, 1 or more'],
    ['SUBSYNC_RETENTION_DAYS', '0', 'whole number of days, 1 or more'],
    ['SUBSYNC_RETENTION_DAYS', '30d', 'whole number of days, 1 or more'],
    ['SUBSYNC_HTTP_TIMEOUT_MS', '0', 'whole number of milliseconds'],
    ['SUBSYNC_HTTP_TIMEOUT_MS', 'soon', 'whole number of milliseconds'],
    ['SUBSYNC_HTTP_TIMEOUT_MS', String(JOB_LOCK_MS / 2), 'job lock'],
    ['SUBSYNC_QUEUE_PREFIX', 'sub:sync', 'hash tag'],
    ['SUBSYNC_QUEUE_PREFIX', 'sub}sync{', 'hash tag'],
    ['SUBSYNC_LOG_LEVEL', 'verbose', 'one of fatal, error, warn, info, debug, trace, silent'],
  ])('rejects %s=%j', (variable, value, expected) => {
    const err = configError({ [variable]: value });
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]?.variable).toBe(variable);
    expect(err.problems[0]?.expected).toContain(expected);
    expect(err.message).toContain(variable);
    expect(err.message).toContain(expected);
  });

  it('accepts the highest timeout below half the job lock', () => {
    expect(loadConfig({ SUBSYNC_HTTP_TIMEOUT_MS: String(JOB_LOCK_MS / 2 - 1) }).httpTimeoutMs).toBe(JOB_LOCK_MS / 2 - 1);
  });

  it('reports every bad value together, one line each, in one error', () => {
    const err = configError({
      SUBSYNC_RATE: 'abc',
      SUBSYNC_CONCURRENCY: '-1',
      REDIS_URL: 'mysql://db',
      SUBSYNC_LOG_LEVEL: 'loud',
      SUBSYNC_API_URL: 'https://fine.example.com',
    });
    expect(err.problems.map((p) => p.variable)).toEqual(['REDIS_URL', 'SUBSYNC_RATE', 'SUBSYNC_CONCURRENCY', 'SUBSYNC_LOG_LEVEL']);
    const lines = err.message.split('\n');
    expect(lines).toHaveLength(4);
    expect(lines).toContain('SUBSYNC_RATE="abc": expected a positive number of requests per second');
    expect(lines).toContain('SUBSYNC_CONCURRENCY="-1": expected a positive whole number');
  });

  it('never echoes secret values, in the message or the problems', () => {
    const cardKey = 'f'.repeat(63) + 'g';
    const token = 'tooShortSecret';
    const auth = 'Bearer hunter2\nmore';
    const err = configError({ SUBSYNC_CARD_KEY: cardKey, SUBSYNC_DASHBOARD_TOKEN: token, SUBSYNC_API_AUTH: auth });
    expect(err.problems).toHaveLength(3);
    for (const secret of [cardKey, 'f'.repeat(20), token, 'hunter2']) {
      expect(err.message).not.toContain(secret);
      expect(JSON.stringify(err.problems)).not.toContain(secret);
    }
    expect(err.message).toContain('SUBSYNC_CARD_KEY=(hidden): expected exactly 64 hexadecimal characters');
    expect(err.problems.every((p) => p.value === '(hidden)')).toBe(true);
  });

  it('masks the password of a bad URL', () => {
    const err = configError({ REDIS_URL: 'http://user:pa55word@redis.example.com:6379' });
    expect(err.message).not.toContain('pa55word');
    expect(err.message).toContain('user:***@redis.example.com');
  });

  it('warns about unknown SUBSYNC_ variables (likely typos) without failing', () => {
    const config = loadConfig({ SUBSYNC_CONCURENCY: '4' });
    expect(config.concurrency).toBe(DEFAULT_CONCURRENCY);
    expect(config.warnings).toHaveLength(1);
    expect(config.warnings[0]).toContain('SUBSYNC_CONCURENCY');
  });

  it('documents every variable it reads', () => {
    for (const v of CONFIG_VARIABLES) {
      expect(v.description.length).toBeGreaterThan(10);
      expect(v.expected.length).toBeGreaterThan(5);
    }
    expect(CONFIG_VARIABLES.map((v) => v.name)).toContain('SUBSYNC_CARD_KEY');
  });
});

describe('requireApiUrl', () => {
  it('returns the URL when set', () => {
    expect(requireApiUrl(loadConfig({ SUBSYNC_API_URL: 'http://127.0.0.1:8787' }))).toBe('http://127.0.0.1:8787');
  });

  it('throws a ConfigError saying to set SUBSYNC_API_URL when unset', () => {
    const config = loadConfig({ SUBSYNC_API_URL: '' });
    expect(() => requireApiUrl(config)).toThrow(ConfigError);
    try {
      requireApiUrl(config);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      expect(err.problems[0]?.variable).toBe('SUBSYNC_API_URL');
      expect(err.message).toMatch(/^SUBSYNC_API_URL is not set: expected .*set SUBSYNC_API_URL/);
    }
  });

  it('keeps the HTTP timeout under half the job lock, whichever of the two is set', () => {
    expect(loadConfig({ SUBSYNC_JOB_LOCK_MS: '8000', SUBSYNC_HTTP_TIMEOUT_MS: '3000' })).toMatchObject({ jobLockMs: 8000, httpTimeoutMs: 3000 });
    const err = (() => {
      try {
        loadConfig({ SUBSYNC_JOB_LOCK_MS: '8000' });
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).problems.map((p) => p.variable)).toEqual(['SUBSYNC_HTTP_TIMEOUT_MS']);
  });

  it('reads retired card keys for rotation, never echoing them', () => {
    const config = loadConfig({ SUBSYNC_CARD_KEYS_PREVIOUS: `k0:${'ab'.repeat(32)},old-2:${'cd'.repeat(32)}` });
    expect(config.cardKeysPrevious.map((k) => [k.id, k.key.length])).toEqual([['k0', 32], ['old-2', 32]]);
    expect(() => loadConfig({ SUBSYNC_CARD_KEYS_PREVIOUS: 'k0:1234' })).toThrow(/SUBSYNC_CARD_KEYS_PREVIOUS=\(hidden\)/);
  });
});

const ROOT = path.resolve(import.meta.dirname, '..');

/** The rows of the README's "## Configuration" table: variable, default, meaning. */
function readmeConfigurationTable(): Array<{ name: string; default: string }> {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Configuration\n');
  expect(start).toBeGreaterThan(0);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => {
      const cells = line.split(' | ').map((cell) => cell.replace(/^\|\s*|\s*\|$/g, '').trim());
      return { name: (cells[0] ?? '').replace(/`/g, ''), default: (cells[1] ?? '').replace(/`/g, '') };
    });
}

describe('the variables, declared once', () => {
  it('are the same in the table and in the schema that checks them', () => {
    expect([...SCHEMA_VARIABLES].sort()).toEqual(CONFIG_VARIABLES.map((v) => v.name).sort());
    expect(new Set(CONFIG_VARIABLES.map((v) => v.name)).size).toBe(CONFIG_VARIABLES.length);
  });

  it("are listed by the README's Configuration table, each once, in the same order, with the same defaults", () => {
    const table = readmeConfigurationTable();
    expect(table.map((row) => row.name)).toEqual(CONFIG_VARIABLES.map((v) => v.name));
    for (const [i, v] of CONFIG_VARIABLES.entries()) {
      const shown = table[i]?.default;
      // No default: a dash, or a word saying what unset does ("adaptive"), never a value.
      if (v.default === undefined) expect(shown, v.name).toMatch(/^(—|[a-z]+)$/);
      else expect(shown, v.name).toBe(v.default);
    }
  });

  it('take the default the table shows when unset', () => {
    const unset = loadConfig({});
    for (const v of CONFIG_VARIABLES.filter((x) => x.default !== undefined)) {
      expect(loadConfig({ [v.name]: v.default }), v.name).toEqual(unset);
    }
  });

  it('take a command\'s own default in place of the table\'s, and the environment over both', () => {
    expect(loadConfig({}, { defaults: { SUBSYNC_LOG_LEVEL: 'error' } }).logLevel).toBe('error');
    expect(loadConfig({ SUBSYNC_LOG_LEVEL: 'debug' }, { defaults: { SUBSYNC_LOG_LEVEL: 'error' } }).logLevel).toBe('debug');
    expect(loadConfig({ SUBSYNC_LOG_LEVEL: '' }, { defaults: { SUBSYNC_LOG_LEVEL: 'error' } }).logLevel).toBe('error');
    expect(() => loadConfig({}, { defaults: { SUBSYNC_LOG_LEVLE: 'error' } })).toThrow(/SUBSYNC_LOG_LEVLE/);
  });

  it('are read from the environment by src/config.ts alone', () => {
    const files = ['src', 'jobs'].flatMap((dir) =>
      readdirSync(path.join(ROOT, dir), { recursive: true, withFileTypes: true })
        .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
        .map((entry) => path.relative(ROOT, path.join(entry.parentPath, entry.name))),
    );
    const readers = files.filter((file) => file !== 'src/config.ts' && /\bprocess\.env\b/.test(readFileSync(path.join(ROOT, file), 'utf8')));
    expect(readers).toEqual([]);
    // Every variable the code or the README names is a declared one.
    const declared = new Set(CONFIG_VARIABLES.map((v) => v.name));
    const named = new Set([...files.map((file) => readFileSync(path.join(ROOT, file), 'utf8')), readFileSync(path.join(ROOT, 'README.md'), 'utf8')].flatMap((text) => text.match(/\bSUBSYNC_[A-Z][A-Z0-9_]*\b/g) ?? []));
    expect([...named].filter((name) => !declared.has(name))).toEqual([]);
  });
});
