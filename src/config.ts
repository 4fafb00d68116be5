/**
 * Configuration from the environment, parsed once.
 *
 * `loadConfig(env)` is the only place in subsync that reads environment
 * variables: everything else receives a {@link Config}. Every variable is
 * validated by one zod schema, and all bad values are reported together in one
 * {@link ConfigError}, so an operator fixes the whole environment in one go
 * instead of one variable per restart.
 *
 * Rules shared by every variable:
 * - an empty string counts as unset (docker-compose's `${VAR:-}` yields one);
 * - secret values (the card key, the API's Authorization value, the dashboard
 *   token) are never echoed back in an error, and URLs are echoed with their
 *   password masked.
 */
import path from 'node:path';
import { z } from 'zod';
import { SubsyncError } from './errors.js';
import { DEFAULT_CONCURRENCY, HTTP_DEFAULTS, JOB_LOCK_MS } from './policy.js';

/** pino's level names, lowest-volume first; `silent` turns logging off. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** One of {@link LOG_LEVELS}. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The validated configuration. Flags given on the command line override these values. */
export interface Config {
  /** SUBSYNC_API_URL: the service's base_url, without a trailing slash. Unset for `sandbox` and `demo`, which supply their own; see {@link requireApiUrl}. */
  apiUrl?: string;
  /** SUBSYNC_API_AUTH: the value sent as the Authorization header; unset sends none. */
  apiAuth?: string;
  /** REDIS_URL: the Redis holding the queues, the ledger and the API budget. Default `redis://127.0.0.1:6379`. */
  redisUrl: string;
  /** SUBSYNC_RATE: requests per second for the whole fleet; unset = adaptive (slow down on 429). */
  rate?: number;
  /** SUBSYNC_CONCURRENCY: rows at the API at once per worker process (and jobs held). Default {@link DEFAULT_CONCURRENCY}. */
  concurrency: number;
  /** SUBSYNC_EXPORT_SHARE: the export's least share of the rate while imports run too (0.05 to 0.95; more beside fewer than three imports). Default 0.4. */
  exportShare: number;
  /** SUBSYNC_DATA_DIR as an absolute path (inbox, processing, done, failed, results, exports). Default `./var`. */
  dataDir: string;
  /** SUBSYNC_CSV_BOM: results.csv, errors.csv and CSV exports start with a UTF-8 BOM (spreadsheets then read them as UTF-8). Default true. */
  csvBom: boolean;
  /** SUBSYNC_CARD_KEY: the 32-byte AES-256-GCM key for card fields at rest; unset refuses card imports (except against the sandbox). */
  cardKey?: Buffer;
  /** SUBSYNC_CARD_KEY_ID: a short id stored beside each ciphertext, so keys can be rotated. Default `k1`. */
  cardKeyId: string;
  /** SUBSYNC_CARD_KEYS_PREVIOUS: retired keys that still open card data sealed before a rotation. */
  cardKeysPrevious: Array<{ id: string; key: Buffer }>;
  /** SUBSYNC_DASHBOARD_TOKEN: when set, every dashboard route requires it; required when the dashboard listens beyond loopback. */
  dashboardToken?: string;
  /** SUBSYNC_DASHBOARD_TOKENS: named dashboard tokens, each with its role (viewer, operator, admin). */
  dashboardTokens: Array<{ name: string; role: 'viewer' | 'operator' | 'admin'; token: string }>;
  /** SUBSYNC_DASHBOARD_URL: the dashboard's address as people reach it, for links in notifications; unset sends none. */
  dashboardUrl?: string;
  /** SUBSYNC_WEBHOOK_URL: where lifecycle events are POSTed (src/notify/); unset sends none. */
  webhookUrl?: string;
  /** SUBSYNC_WEBHOOK_SECRET: the HMAC-SHA256 key of the X-Subsync-Signature header. */
  webhookSecret?: string;
  /** SUBSYNC_ACTOR: who the audit trail records for commands; default `cli:<os user>`. */
  actor?: string;
  /** SUBSYNC_DASHBOARD_HOSTS: Host header names the dashboard answers besides localhost names and its own address (lower case, no port). */
  dashboardHosts: string[];
  /** SUBSYNC_INBOX_SETTLE_MS: how long an inbox file must stay unchanged before it is taken. Default {@link DEFAULT_SETTLE_MS}. */
  inboxSettleMs: number;
  /** SUBSYNC_FAILED_RETENTION_DAYS: how long files stay in failed/ before they are deleted. Default {@link DEFAULT_FAILED_RETENTION_DAYS}. */
  failedRetentionDays: number;
  /** SUBSYNC_RETENTION_DAYS: how long a finished import's record, ledger and counts stay in Redis. Default {@link DEFAULT_RETENTION_DAYS}. */
  retentionDays: number;
  /** SUBSYNC_HTTP_TIMEOUT_MS: time to response headers and between body chunks. Default {@link HTTP_DEFAULTS}.requestTimeoutMs. */
  httpTimeoutMs: number;
  /** SUBSYNC_JOB_LOCK_MS: how long a row job is locked to its worker; a dead worker's job is taken over after it. Default {@link JOB_LOCK_MS}. */
  jobLockMs: number;
  /** SUBSYNC_REDIS_CLUSTER: REDIS_URL names a node of a Redis Cluster. Default false. */
  redisCluster: boolean;
  /** SUBSYNC_REDIS_ACCEPT_LOSS: `worker` and `start` run on a Redis that persists nothing. Default false (refused). */
  redisAcceptLoss: boolean;
  /** SUBSYNC_QUEUE_PREFIX: the prefix of every Redis key. Default `subsync`; `{subsync}` on Redis Cluster. */
  queuePrefix: string;
  /** SUBSYNC_LOG_LEVEL: the pino level. Default `info`. */
  logLevel: LogLevel;
  /** Non-fatal findings, e.g. an unknown `SUBSYNC_*` variable (a likely typo), for the caller to log. */
  warnings: string[];
}

/** One environment variable subsync reads, for `--help`, the README and error messages. */
export interface ConfigVariable {
  /** The variable's name. */
  readonly name: string;
  /** The value an absent variable takes, written as in the environment (the one declaration of its default: `--help` and the README show it as is); undefined when unset means "none". */
  readonly default: string | undefined;
  /** What it is for. */
  readonly description: string;
  /** What a valid value looks like; the text after `expected` in a {@link ConfigError}. */
  readonly expected: string;
  /** A secret: its value is never echoed. */
  readonly secret: boolean;
}


/** An inbox file must stay unchanged this long before it is taken: long enough for a slow copy's pauses. */
export const DEFAULT_SETTLE_MS = 5_000;
/** Rejected files and their error files are deleted from failed/ after this many days. */
export const DEFAULT_FAILED_RETENTION_DAYS = 30;
/** A finished import's record, ledger and counts (personal data) expire from Redis after this many days. */
export const DEFAULT_RETENTION_DAYS = 30;

/** Every variable subsync reads, in the order `--help` and the README print them. */
export const CONFIG_VARIABLES: readonly ConfigVariable[] = [
  {
    name: 'SUBSYNC_API_URL',
    default: undefined,
    description: "The service's base_url (not needed by `sandbox` and `demo`).",
    expected: 'an http:// or https:// URL, e.g. https://api.example.com',
    secret: false,
  },
  {
    name: 'SUBSYNC_API_AUTH',
    default: undefined,
    description: 'Value of the Authorization header sent to the service.',
    expected: 'a header value on one line (no CR, LF or NUL)',
    secret: true,
  },
  {
    name: 'REDIS_URL',
    default: 'redis://127.0.0.1:6379',
    description: 'Redis for the queues, the import ledger and the shared API budget.',
    expected: 'a redis:// or rediss:// URL with a host, e.g. redis://127.0.0.1:6379',
    secret: false,
  },
  {
    name: 'SUBSYNC_REDIS_CLUSTER',
    default: 'false',
    description: 'REDIS_URL names one node of a Redis Cluster; subsync learns the others and follows redirections.',
    expected: 'true or false (true needs SUBSYNC_QUEUE_PREFIX to start with a hash tag, e.g. {subsync}, and REDIS_URL without a database number)',
    secret: false,
  },
  {
    name: 'SUBSYNC_REDIS_ACCEPT_LOSS',
    default: 'false',
    description: '`worker` and `start` run on a Redis that persists nothing (no AOF, no RDB), accepting that a Redis restart loses every unfinished import (tests, trials).',
    expected: 'true or false',
    secret: false,
  },
  {
    name: 'SUBSYNC_RATE',
    default: undefined,
    description: 'API requests per second for the whole fleet; unset = adaptive (backs off on 429).',
    expected: 'a positive number of requests per second',
    secret: false,
  },
  {
    name: 'SUBSYNC_EXPORT_SHARE',
    default: '0.4',
    description: 'Least share of the rate for an export while imports run too (it takes a turn like one more import: half beside one; either has it all alone).',
    expected: 'a number from 0.05 to 0.95',
    secret: false,
  },
  {
    name: 'SUBSYNC_CONCURRENCY',
    default: String(DEFAULT_CONCURRENCY),
    description: 'Row jobs in flight per worker process.',
    expected: 'a positive whole number',
    secret: false,
  },
  {
    name: 'SUBSYNC_DATA_DIR',
    default: './var',
    description: 'Folder for inbox, processing, done, failed, results and exports.',
    expected: 'a directory path',
    secret: false,
  },
  {
    name: 'SUBSYNC_CSV_BOM',
    default: 'true',
    description: 'Start results.csv, errors.csv and CSV exports with a UTF-8 BOM, so spreadsheets read them as UTF-8; false for machine consumers.',
    expected: 'true or false',
    secret: false,
  },
  {
    name: 'SUBSYNC_CARD_KEY',
    default: undefined,
    description: 'AES-256-GCM key for card fields in Redis, 64 hex characters; card imports refuse to start without it (except against the sandbox).',
    expected: 'exactly 64 hexadecimal characters (32 bytes), e.g. from `openssl rand -hex 32`',
    secret: true,
  },
  {
    name: 'SUBSYNC_CARD_KEY_ID',
    default: 'k1',
    description: 'Id stored with each encrypted card field, so the key can be rotated.',
    expected: '1 to 32 characters among letters, digits, "_" and "-"',
    secret: false,
  },
  {
    name: 'SUBSYNC_CARD_KEYS_PREVIOUS',
    default: undefined,
    description: 'Retired card keys as id:hex pairs separated by commas; they only open card data sealed before a rotation.',
    expected: 'comma-separated id:key pairs, each id 1-32 of A-Z a-z 0-9 _ - and each key 64 hex characters',
    secret: true,
  },
  {
    name: 'SUBSYNC_DASHBOARD_TOKEN',
    default: undefined,
    description: 'When set, every dashboard route requires this token; required when the dashboard listens beyond loopback.',
    expected: 'at least 16 characters',
    secret: true,
  },
  {
    name: 'SUBSYNC_DASHBOARD_TOKENS',
    default: undefined,
    description: 'Named dashboard tokens with roles, name:role:token separated by commas; roles viewer (reads), operator (also retries, edits, cancels, pauses), admin (also schedules and settings). SUBSYNC_DASHBOARD_TOKEN, when set too, is the user admin.',
    expected:
      'comma-separated name:role:token entries: name 1-32 of A-Z a-z 0-9 _ . - (unique, and not "admin" when SUBSYNC_DASHBOARD_TOKEN is set), role viewer, operator or admin, token at least 16 characters without commas (each token different)',
    secret: true,
  },
  {
    name: 'SUBSYNC_DASHBOARD_URL',
    default: undefined,
    description: "The dashboard's address as its users reach it, for the links in notifications.",
    expected: 'an http:// or https:// URL, e.g. https://subsync.internal:8080',
    secret: false,
  },
  {
    name: 'SUBSYNC_WEBHOOK_URL',
    default: undefined,
    description: 'Where import and export events are POSTed as JSON (a Slack incoming webhook works); unset sends none.',
    expected: 'an http:// or https:// URL, e.g. https://hooks.slack.com/services/…',
    secret: true,
  },
  {
    name: 'SUBSYNC_WEBHOOK_SECRET',
    default: undefined,
    description: 'Key of the X-Subsync-Signature header (HMAC-SHA256 of the body); unset sends no signature.',
    expected: 'at least 16 characters',
    secret: true,
  },
  {
    name: 'SUBSYNC_ACTOR',
    default: undefined,
    description: 'Who the audit trail records for the commands run in this environment; unset, cli:<the os user>.',
    expected: '1 to 100 printable characters',
    secret: false,
  },
  {
    name: 'SUBSYNC_DASHBOARD_HOSTS',
    default: undefined,
    description: 'Host names (comma-separated) the dashboard answers to besides localhost names and the address it listens on; any other Host header is refused (DNS rebinding).',
    expected: 'comma-separated host names or IP addresses without ports (IPv6 in brackets), e.g. subsync.internal,10.0.0.5',
    secret: false,
  },
  {
    name: 'SUBSYNC_INBOX_SETTLE_MS',
    default: String(DEFAULT_SETTLE_MS),
    description: 'How long an inbox file must stay unchanged (size and mtime) before it is taken, in milliseconds.',
    expected: 'a whole number of milliseconds, 0 or more',
    secret: false,
  },
  {
    name: 'SUBSYNC_FAILED_RETENTION_DAYS',
    default: String(DEFAULT_FAILED_RETENTION_DAYS),
    description: 'How long rejected files and their error files stay in failed/ before they are deleted, in days.',
    expected: 'a whole number of days, 1 or more',
    secret: false,
  },
  {
    name: 'SUBSYNC_RETENTION_DAYS',
    default: String(DEFAULT_RETENTION_DAYS),
    description: "How long a finished import's record, row ledger and counts stay in Redis after its results are written, in days; an unfinished import never expires.",
    expected: 'a whole number of days, 1 or more',
    secret: false,
  },
  {
    name: 'SUBSYNC_HTTP_TIMEOUT_MS',
    default: String(HTTP_DEFAULTS.requestTimeoutMs),
    description: 'HTTP timeout to response headers and between body chunks, in milliseconds.',
    expected:
      'a whole number of milliseconds, at least 1 and below half the job lock ' +
      `(SUBSYNC_JOB_LOCK_MS, default ${JOB_LOCK_MS} ms), so a worker waiting on a slow request is never taken for a dead one and its row run twice`,
    secret: false,
  },
  {
    name: 'SUBSYNC_JOB_LOCK_MS',
    default: String(JOB_LOCK_MS),
    description: "How long a row job stays locked to its worker; a killed worker's jobs are taken over after it. Must exceed twice SUBSYNC_HTTP_TIMEOUT_MS.",
    expected: 'a whole number of milliseconds, at least 2000 and more than twice SUBSYNC_HTTP_TIMEOUT_MS (a live request must never outlast the lock)',
    secret: false,
  },
  {
    name: 'SUBSYNC_QUEUE_PREFIX',
    default: 'subsync',
    description: 'Prefix of every Redis key; use {subsync} (a hash tag) on Redis Cluster.',
    expected: 'up to 64 letters, digits, "_", "-" or ".", optionally starting with a {hash tag}, e.g. subsync or {subsync}',
    secret: false,
  },
  {
    name: 'SUBSYNC_LOG_LEVEL',
    default: 'info',
    description: `Log level: ${LOG_LEVELS.join(', ')}.`,
    expected: `one of ${LOG_LEVELS.join(', ')}`,
    secret: false,
  },
];

/** One bad environment variable. */
export interface ConfigProblem {
  /** The variable's name. */
  variable: string;
  /** The value as given (password-masked for URLs), `(hidden)` for secrets, undefined when unset. */
  value: string | undefined;
  /** What a valid value looks like. */
  expected: string;
}

/**
 * The configuration is invalid. Carries every problem found, and its message
 * has one line per problem, e.g. `SUBSYNC_RATE="abc": expected a positive
 * number of requests per second`. The CLI exits 78 (EX_CONFIG) on it.
 */
export class ConfigError extends SubsyncError {
  readonly code = 'CONFIG_INVALID';
  /** Every bad variable, in the order of {@link CONFIG_VARIABLES}. */
  readonly problems: ConfigProblem[];

  constructor(problems: ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
    this.problems = problems;
  }
}

function formatProblem(problem: ConfigProblem): string {
  const shown = problem.value === undefined ? ' is not set' : problem.value === HIDDEN ? `=${HIDDEN}` : `=${JSON.stringify(problem.value)}`;
  return `${problem.variable}${shown}: expected ${problem.expected}`;
}

const HIDDEN = '(hidden)';
const MAX_ECHO = 200;

/** The value to put in an error: hidden for secrets, password masked in URLs, long values cut. */
function echo(variable: ConfigVariable, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (variable.secret) return HIDDEN;
  // scheme://user:password@host: keep the user, never the password.
  const masked = value.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/:@]*:)[^/@]*@/i, '$1***@');
  return masked.length > MAX_ECHO ? `${masked.slice(0, MAX_ECHO)}…` : masked;
}

const byName = new Map(CONFIG_VARIABLES.map((variable) => [variable.name, variable]));

function variable(name: string): ConfigVariable {
  const found = byName.get(name);
  if (!found) throw new Error(`config: ${name} is not in CONFIG_VARIABLES`);
  return found;
}

const wholeNumber = z
  .string()
  .regex(/^\d+$/)
  .transform(Number)
  .pipe(z.number().int().positive().max(Number.MAX_SAFE_INTEGER));

/**
 * The rules of every variable of {@link CONFIG_VARIABLES}, by name. Defaults
 * are not here: an absent (unset or empty) variable is given its table
 * default before this schema sees it, and is undefined when it has none.
 */
const EnvSchema = z.object({
  SUBSYNC_API_URL: z
    .url({ protocol: /^https?$/ })
    .transform((url) => url.replace(/\/+$/, ''))
    .optional(),
  // undici refuses a header value with CR/LF/NUL; refuse it here, at start.
  SUBSYNC_API_AUTH: z
    .string()
    .regex(/^[^\r\n\0]+$/)
    .optional(),
  REDIS_URL: z
    .url({ protocol: /^rediss?$/ })
    .refine((url) => new URL(url).hostname !== ''),
  SUBSYNC_REDIS_CLUSTER: z
    .enum(['true', 'false', '1', '0', 'yes', 'no'])
    .transform((flag) => flag === 'true' || flag === '1' || flag === 'yes'),
  SUBSYNC_REDIS_ACCEPT_LOSS: z
    .enum(['true', 'false', '1', '0', 'yes', 'no'])
    .default('false')
    .transform((flag) => flag === 'true' || flag === '1' || flag === 'yes'),
  SUBSYNC_RATE: z.coerce.number().positive().finite().optional(),
  SUBSYNC_CONCURRENCY: wholeNumber,
  SUBSYNC_EXPORT_SHARE: z.coerce.number().min(0.05).max(0.95),
  SUBSYNC_DATA_DIR: z
    .string()
    .transform((dir) => path.resolve(dir)),
  SUBSYNC_CSV_BOM: z
    .enum(['true', 'false', '1', '0', 'yes', 'no'])
    .transform((flag) => flag === 'true' || flag === '1' || flag === 'yes'),
  SUBSYNC_CARD_KEY: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/)
    .transform((hex) => Buffer.from(hex, 'hex'))
    .optional(),
  SUBSYNC_CARD_KEY_ID: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,32}$/),
  SUBSYNC_DASHBOARD_TOKEN: z.string().min(16).optional(),
  SUBSYNC_DASHBOARD_TOKENS: z
    .string()
    .transform((text) => text.split(',').map((entry) => entry.trim()).filter((entry) => entry !== ''))
    .pipe(
      z
        .array(
          z
            .string()
            .regex(/^[A-Za-z0-9_.-]{1,32}:(viewer|operator|admin):[^,\s]{16,}$/)
            .transform((entry) => {
              const [name = '', role = '', ...token] = entry.split(':');
              return { name, role: z.enum(['viewer', 'operator', 'admin']).parse(role), token: token.join(':') };
            }),
        )
        .min(1)
        .refine((tokens) => new Set(tokens.map((t) => t.name)).size === tokens.length && new Set(tokens.map((t) => t.token)).size === tokens.length),
    )
    .optional(),
  SUBSYNC_DASHBOARD_URL: z
    .url({ protocol: /^https?$/ })
    .transform((url) => url.replace(/\/+$/, ''))
    .optional(),
  SUBSYNC_WEBHOOK_URL: z.url({ protocol: /^https?$/ }).optional(),
  SUBSYNC_WEBHOOK_SECRET: z.string().min(16).optional(),
  SUBSYNC_ACTOR: z
    .string()
    .regex(/^[\x20-\x7e\u00a0-\uffff]{1,100}$/)
    .optional(),
  SUBSYNC_DASHBOARD_HOSTS: z
    .string()
    .transform((text) => text.split(',').map((name) => name.trim().toLowerCase()).filter((name) => name !== ''))
    .pipe(z.array(z.string().regex(/^(?:[a-z0-9_.-]+|\[[0-9a-f:.]+\])$/)).min(1))
    .optional(),
  SUBSYNC_INBOX_SETTLE_MS: z
    .string()
    .regex(/^\d+$/)
    .transform(Number)
    .pipe(z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)),
  SUBSYNC_FAILED_RETENTION_DAYS: wholeNumber.pipe(z.number().max(36_500)),
  SUBSYNC_RETENTION_DAYS: wholeNumber.pipe(z.number().max(36_500)),
  SUBSYNC_HTTP_TIMEOUT_MS: wholeNumber,
  SUBSYNC_JOB_LOCK_MS: wholeNumber.pipe(z.number().min(2000)),
  SUBSYNC_CARD_KEYS_PREVIOUS: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,32}:[0-9a-fA-F]{64}(,[A-Za-z0-9_-]{1,32}:[0-9a-fA-F]{64})*$/)
    .transform((text) => text.split(',').map((pair) => ({ id: pair.slice(0, pair.indexOf(':')), key: Buffer.from(pair.slice(pair.indexOf(':') + 1), 'hex') })))
    .optional(),
  SUBSYNC_QUEUE_PREFIX: z
    .string()
    .max(64)
    .regex(/^(?:\{[A-Za-z0-9_.-]+\})?[A-Za-z0-9_.-]*$/),
  SUBSYNC_LOG_LEVEL: z.enum(LOG_LEVELS),
}).superRefine((env, ctx) => {
  // The HTTP timeout must stay well under the job lock, so a live job is never taken for a dead one.
  if (env.SUBSYNC_HTTP_TIMEOUT_MS * 2 >= env.SUBSYNC_JOB_LOCK_MS) {
    ctx.addIssue({ code: 'custom', path: ['SUBSYNC_HTTP_TIMEOUT_MS'], message: 'not under half the job lock' });
  }
  // The single token is the user admin: a named token cannot take that name.
  if (env.SUBSYNC_DASHBOARD_TOKEN !== undefined && env.SUBSYNC_DASHBOARD_TOKENS?.some((t) => t.name === 'admin')) {
    ctx.addIssue({ code: 'custom', path: ['SUBSYNC_DASHBOARD_TOKENS'], message: 'admin is the single token' });
  }
  // On a cluster, the scripts need every key in one slot (a hash-tagged prefix), and there is only database 0.
  if (env.SUBSYNC_REDIS_CLUSTER && (!env.SUBSYNC_QUEUE_PREFIX.startsWith('{') || !/^\/?0?$/.test(new URL(env.REDIS_URL).pathname))) {
    ctx.addIssue({ code: 'custom', path: ['SUBSYNC_REDIS_CLUSTER'], message: 'needs a hash-tagged prefix and database 0' });
  }
});

/** The names of the variables {@link loadConfig}'s schema checks: the same as {@link CONFIG_VARIABLES}'s (a test holds them to it). */
export const SCHEMA_VARIABLES: readonly string[] = Object.keys(EnvSchema.shape);

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /**
   * Defaults of this command in place of the table's, by variable name: the
   * demo is quiet unless asked (`{ SUBSYNC_LOG_LEVEL: 'error' }`).
   */
  defaults?: Readonly<Record<string, string>>;
}

/**
 * Reads and validates every variable of {@link CONFIG_VARIABLES} from `env`;
 * an absent one takes its default from that table (or from `options.defaults`).
 *
 * @param env - the environment; defaults to `process.env`. Tests pass their own.
 * @throws ConfigError listing every bad value at once.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, options: LoadConfigOptions = {}): Config {
  for (const name of Object.keys(options.defaults ?? {})) variable(name);
  const given: Record<string, string | undefined> = {};
  const raw: Record<string, string | undefined> = {};
  for (const { name, default: fallback } of CONFIG_VARIABLES) {
    const value = env[name];
    given[name] = value === '' ? undefined : value;
    raw[name] = given[name] ?? options.defaults?.[name] ?? fallback;
  }

  const parsed = EnvSchema.safeParse(raw);
  if (!parsed.success) {
    const bad = new Set(parsed.error.issues.map((issue) => String(issue.path[0])));
    // One problem per variable, whatever the number of rules it broke, in table order.
    const problems = CONFIG_VARIABLES.filter(({ name }) => bad.has(name)).map((v) => ({
      variable: v.name,
      value: echo(v, given[v.name]),
      expected: v.expected,
    }));
    throw new ConfigError(problems);
  }

  const e = parsed.data;
  const known = new Set(CONFIG_VARIABLES.map(({ name }) => name));
  const warnings = Object.keys(env)
    .filter((name) => name.startsWith('SUBSYNC_') && !known.has(name))
    .sort()
    .map((name) => `${name} is not a subsync variable and is ignored (known: ${[...known].filter((k) => k.startsWith('SUBSYNC_')).join(', ')})`);

  return {
    apiUrl: e.SUBSYNC_API_URL,
    apiAuth: e.SUBSYNC_API_AUTH,
    redisUrl: e.REDIS_URL,
    redisCluster: e.SUBSYNC_REDIS_CLUSTER,
    redisAcceptLoss: e.SUBSYNC_REDIS_ACCEPT_LOSS,
    rate: e.SUBSYNC_RATE,
    concurrency: e.SUBSYNC_CONCURRENCY,
    exportShare: e.SUBSYNC_EXPORT_SHARE,
    dataDir: e.SUBSYNC_DATA_DIR,
    csvBom: e.SUBSYNC_CSV_BOM,
    cardKey: e.SUBSYNC_CARD_KEY,
    cardKeyId: e.SUBSYNC_CARD_KEY_ID,
    dashboardToken: e.SUBSYNC_DASHBOARD_TOKEN,
    dashboardTokens: e.SUBSYNC_DASHBOARD_TOKENS ?? [],
    dashboardUrl: e.SUBSYNC_DASHBOARD_URL,
    webhookUrl: e.SUBSYNC_WEBHOOK_URL,
    webhookSecret: e.SUBSYNC_WEBHOOK_SECRET,
    actor: e.SUBSYNC_ACTOR,
    dashboardHosts: e.SUBSYNC_DASHBOARD_HOSTS ?? [],
    inboxSettleMs: e.SUBSYNC_INBOX_SETTLE_MS,
    failedRetentionDays: e.SUBSYNC_FAILED_RETENTION_DAYS,
    retentionDays: e.SUBSYNC_RETENTION_DAYS,
    httpTimeoutMs: e.SUBSYNC_HTTP_TIMEOUT_MS,
    jobLockMs: e.SUBSYNC_JOB_LOCK_MS,
    cardKeysPrevious: e.SUBSYNC_CARD_KEYS_PREVIOUS ?? [],
    queuePrefix: e.SUBSYNC_QUEUE_PREFIX,
    logLevel: e.SUBSYNC_LOG_LEVEL,
    warnings,
  };
}

/**
 * The API base URL, for commands that talk to the real service.
 *
 * @throws ConfigError when SUBSYNC_API_URL is unset, saying to set it.
 */
export function requireApiUrl(config: Pick<Config, 'apiUrl'>): string {
  if (config.apiUrl === undefined) {
    throw new ConfigError([
      {
        variable: 'SUBSYNC_API_URL',
        value: undefined,
        expected: `${variable('SUBSYNC_API_URL').expected}: set SUBSYNC_API_URL to the service's base_url (or run \`subsync demo\` / \`subsync sandbox\` to try subsync without one)`,
      },
    ]);
  }
  return config.apiUrl;
}
