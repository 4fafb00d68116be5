/**
 * The logger: pino, with card data and credentials redacted by configuration
 * rather than by care.
 *
 * Redaction is by path. pino's wildcards match one level each, so the card
 * fields are listed at every depth from 0 to {@link REDACT_DEPTH}: a log call
 * such as `log.info({ job: { data: { CreditCardInfo: { AccountNumber } } } })`
 * (depth 3) is covered, arrays included (`rows.0.CVCode`). Deeper objects are
 * not: log ids and outcomes, not whole request bodies nested further than that.
 * Errors logged as `err` or `error` have their texts scrubbed of card-shaped
 * digit runs ({@link scrubbedError}).
 */
import pino from 'pino';
import { scrubSecrets } from './secrets.js';

/** Field names that are payment-card data or a customer's password, as the API spells them and as we might. */
const CARD_FIELDS = ['AccountNumber', 'CVCode', 'cardNumber', 'cvc', 'Password', 'password'] as const;

/** Deepest nesting (number of parent objects) at which card fields are redacted. */
export const REDACT_DEPTH = 4;

function atDepths(field: string, maxDepth: number): string[] {
  return Array.from({ length: maxDepth + 1 }, (_, depth) => [...Array<string>(depth).fill('*'), field].join('.'));
}

/**
 * Every path pino censors: card fields at depths 0..{@link REDACT_DEPTH}, the
 * API's Authorization header wherever a request's headers are logged, and the
 * secrets of the configuration (apiAuth, cardKey, dashboardToken, dashboardTokens,
 * webhookUrl, webhookSecret) should it be
 * logged whole.
 */
export const REDACT_PATHS: readonly string[] = [
  ...CARD_FIELDS.flatMap((field) => atDepths(field, REDACT_DEPTH)),
  'req.headers.authorization',
  'headers.authorization',
  'headers.Authorization',
  '*.headers.authorization',
  '*.headers.Authorization',
  ...['apiAuth', 'cardKey', 'dashboardToken', 'dashboardTokens', 'webhookUrl', 'webhookSecret'].flatMap((field) => atDepths(field, 1)),
];

/** What a censored value is replaced with. */
export const REDACTED = '[redacted]';

/**
 * pino's error serializer with every text of its output scrubbed of
 * card-number-shaped digit runs (src/secrets.ts): the message and stack,
 * its causes' (pino joins them in), the API's words and any other field. A
 * path cannot reach a card number a service echoed into a message; this
 * does. The row's own CVC is scrubbed before the error reaches a logger
 * (src/rows/protocol.ts).
 */
export function scrubbedError(error: Error): pino.SerializedError {
  const serialized: unknown = pino.stdSerializers.err(error);
  // Something else logged as `err` (a string, a plain object) comes back as it was: scrubbed as a copy.
  if (typeof serialized !== 'object' || serialized === null || !(error instanceof Error)) return scrubTexts(serialized, 0) as pino.SerializedError;
  // The serialized error is pino's own fresh object: its fields are replaced, never the error's.
  const fields = serialized as Record<string, unknown>;
  for (const [key, value] of Object.entries(fields)) fields[key] = scrubTexts(value, 0);
  return serialized as pino.SerializedError;
}

/** A copy of `value` with its strings scrubbed, {@link REDACT_DEPTH} levels down. */
function scrubTexts(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return scrubSecrets(value);
  if (typeof value !== 'object' || value === null || depth >= REDACT_DEPTH) return value;
  if (Array.isArray(value)) return value.map((item: unknown) => scrubTexts(item, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, scrubTexts(item, depth + 1)]));
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** A pino level name (see `LOG_LEVELS` in config.ts). Default `info`. */
  level?: string;
  /** Where lines go. Default: pino's standard output destination. */
  destination?: pino.DestinationStream;
}

/**
 * Creates the root logger. Modules take child loggers bound to their context
 * (`logger.child({ importId, row, jobId })`); bindings are redacted too.
 */
export function createLogger(options: LoggerOptions = {}): pino.Logger {
  const pinoOptions: pino.LoggerOptions = {
    level: options.level ?? 'info',
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    serializers: {
      err: scrubbedError,
      error: scrubbedError,
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return options.destination ? pino(pinoOptions, options.destination) : pino(pinoOptions);
}
