import {
  CONNECT_PHASE_ERROR_CODES,
  NOT_APPLIED_STATUSES,
  TRANSIENT_MESSAGE_PATTERNS,
  TRANSIENT_NETWORK_ERROR_CODES,
  TRANSIENT_STATUSES,
  isServerErrorStatus,
} from '../policy.js';
import { SubsyncError, type SubsyncErrorCode } from '../errors.js';
import { scrubErrorInPlace, scrubberFor, type KnownSecrets } from '../secrets.js';

/** The seven operations of the service's interface, by name. */
export type Endpoint =
  | 'searchCustomers'
  | 'getCustomer'
  | 'createCustomer'
  | 'updateCustomer'
  | 'getOffer'
  | 'signUp'
  | 'updatePaymentMethod';

/**
 * Stable codes of the API error family (declared with every other code in
 * src/errors.ts); call sites branch on these or on the classes. They are
 * subsync's classification of an answer: the service itself gives no code,
 * only a status and a Message (kept as `status` and `apiMessage`).
 */
export type ApiErrorCode = Extract<SubsyncErrorCode, `API_${string}`>;

export interface ApiErrorDetails {
  endpoint: Endpoint;
  method: string;
  /** HTTP status, when an answer came back. */
  status?: number;
  /** The API's own words (the Message member of its answer), when it gave any. */
  apiMessage?: string;
  /** Worth retrying later: network error, timeout, 408, 429, 5xx, or a Message saying so. */
  transient: boolean;
  /** The request may have reached the service and been applied (only ever for POST/PUT). */
  maybeApplied: boolean;
  /** From Retry-After, in milliseconds from when the answer arrived. */
  retryAfterMs?: number;
  cause?: unknown;
}

/**
 * The root of every error the API client raises. Classification happens once,
 * in the factories below; nothing else inspects statuses or error codes.
 */
export abstract class ApiError extends SubsyncError {
  /** The stable code of the subclass. */
  abstract override readonly code: ApiErrorCode;
  readonly endpoint: Endpoint;
  readonly method: string;
  readonly status: number | undefined;
  readonly apiMessage: string | undefined;
  readonly transient: boolean;
  readonly maybeApplied: boolean;
  readonly retryAfterMs: number | undefined;

  constructor(message: string, details: ApiErrorDetails) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.endpoint = details.endpoint;
    this.method = details.method;
    this.status = details.status;
    this.apiMessage = details.apiMessage;
    this.transient = details.transient;
    this.maybeApplied = details.maybeApplied;
    this.retryAfterMs = details.retryAfterMs;
  }

  /**
   * This error with `scrub` applied to its message, the API's words and its
   * stack (kept, frames and all), as an error of the same class: a row that
   * knows its own card values removes them from what the client could only
   * scrub by shape. The cause is scrubbed in place.
   */
  scrubbed(scrub: (text: string) => string): ApiError {
    const Same = this.constructor as new (message: string, details: ApiErrorDetails) => ApiError;
    const copy = new Same(scrub(this.message), {
      endpoint: this.endpoint,
      method: this.method,
      status: this.status,
      apiMessage: this.apiMessage === undefined ? undefined : scrub(this.apiMessage),
      transient: this.transient,
      maybeApplied: this.maybeApplied,
      retryAfterMs: this.retryAfterMs,
      cause: this.cause instanceof Error ? scrubErrorInPlace(this.cause, scrub) : this.cause,
    });
    if (this.stack !== undefined) copy.stack = scrub(this.stack);
    return copy;
  }

  /** The code and, when an answer came, its status: `API_REFUSED 422`, `API_TIMEOUT`. The class of the failure in logs. */
  get codeAndStatus(): string {
    return this.status === undefined ? this.code : `${this.code} ${this.status}`;
  }

  /**
   * What a failed row's reason and an export's failure say: the service's
   * words with the code and status, `EmailAddress is invalid (API_REFUSED
   * 422)`, or the message when the service gave no words. The code stays in
   * the words so that `subsync errors` tells causes apart by it.
   */
  get reason(): string {
    return this.apiMessage ? `${this.apiMessage} (${this.codeAndStatus})` : this.message;
  }

  /** Data for logs and ledgers: never a request body. */
  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      code: this.code,
      message: this.message,
      endpoint: this.endpoint,
      status: this.status,
      apiMessage: this.apiMessage,
      transient: this.transient,
      maybeApplied: this.maybeApplied,
      retryAfterMs: this.retryAfterMs,
    };
  }

  /**
   * Classifies a non-2xx answer. `apiMessage` is the Message of the body when
   * the body had one; `retryAfter` is the raw Retry-After header.
   */
  static fromResponse(input: {
    endpoint: Endpoint;
    method: string;
    status: number;
    apiMessage: string | undefined;
    retryAfter: string | undefined;
    now?: number;
    /** The request's own secrets (its card number and CVC, a password): never in the error's words, in any form. */
    secrets?: KnownSecrets;
  }): ApiError {
    const { endpoint, method, status } = input;
    // The service's words are stored and logged: never with card data or a password in them, whatever it echoed.
    const apiMessage = input.apiMessage === undefined ? undefined : scrubberFor(input.secrets ?? [])(input.apiMessage);
    const mutating = isMutating(method);
    const retryAfterMs = parseRetryAfter(input.retryAfter, input.now ?? Date.now());
    const words = apiMessage ? `: ${apiMessage}` : '';
    const base = { endpoint, method, status, apiMessage, retryAfterMs };
    if (status === 429) {
      return new ApiRateLimitedError(`${endpoint} was rate limited (429)${words}`, { ...base, transient: true, maybeApplied: false });
    }
    if (isServerErrorStatus(status)) {
      return new ApiServerError(`${endpoint} failed with ${status}${words}`, {
        ...base,
        transient: true,
        maybeApplied: mutating && !NOT_APPLIED_STATUSES.has(status),
      });
    }
    const transient = TRANSIENT_STATUSES.has(status) || (apiMessage !== undefined && TRANSIENT_MESSAGE_PATTERNS.some((p) => p.test(apiMessage)));
    const details = { ...base, transient, maybeApplied: false };
    if (status === 401 || status === 403) {
      return new ApiUnauthorizedError(`${endpoint} was not authorised (${status})${words}`, details);
    }
    if (status === 404) return new ApiNotFoundError(`${endpoint} found nothing (404)${words}`, details);
    return new ApiRefusedError(`${endpoint} was refused (${status})${words}`, details);
  }

  /**
   * Classifies a failure without an answer. A fault before the connection was
   * open (refused, DNS, connect timeout) cannot have reached the service; any
   * other (reset, timeout waiting for the answer) may have, for a POST or PUT.
   */
  static fromNetworkError(input: { endpoint: Endpoint; method: string; error: unknown; secrets?: KnownSecrets }): ApiError {
    const { endpoint, method, error } = input;
    const scrub = scrubberFor(input.secrets ?? []);
    const code = errorCode(error);
    const beforeSending = code !== undefined && CONNECT_PHASE_ERROR_CODES.has(code);
    const details: ApiErrorDetails = {
      endpoint,
      method,
      transient: code === undefined || TRANSIENT_NETWORK_ERROR_CODES.has(code),
      maybeApplied: isMutating(method) && !beforeSending,
      cause: error instanceof Error ? scrubErrorInPlace(error, scrub) : error,
    };
    const reason = scrub(error instanceof Error ? error.message : String(error));
    if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') {
      return new ApiTimeoutError(`${endpoint} timed out (${code})`, details);
    }
    return new ApiNetworkError(`${endpoint} failed on the network (${code ?? 'unknown'}): ${reason}`, details);
  }

  /**
   * A 2xx answer whose body does not match the interface's shape. The request
   * was handled, so a create may well have been applied: transient, so the
   * next attempt reconciles instead of giving up on a row that may exist.
   */
  static badResponse(input: { endpoint: Endpoint; method: string; status: number; problem: string; secrets?: KnownSecrets }): ApiError {
    const problem = scrubberFor(input.secrets ?? [])(input.problem);
    return new ApiBadResponseError(`${input.endpoint} answered ${input.status} with a body that does not match the interface: ${problem}`, {
      endpoint: input.endpoint,
      method: input.method,
      status: input.status,
      transient: true,
      maybeApplied: isMutating(input.method),
    });
  }
}

/** A 4xx refusal (validation and the like): permanent unless its Message says otherwise. */
export class ApiRefusedError extends ApiError {
  readonly code = 'API_REFUSED';
}
/** 404: the customer, offer or payment method does not exist. */
export class ApiNotFoundError extends ApiError {
  readonly code = 'API_NOT_FOUND';
}
/** 401/403: the Authorization header (SUBSYNC_API_AUTH) was not accepted. */
export class ApiUnauthorizedError extends ApiError {
  readonly code = 'API_UNAUTHORIZED';
}
/** 429: slow down; `retryAfterMs` says for how long when the service told. */
export class ApiRateLimitedError extends ApiError {
  readonly code = 'API_RATE_LIMITED';
}
/** 5xx: transient; a POST or PUT may have been applied. */
export class ApiServerError extends ApiError {
  readonly code = 'API_SERVER_ERROR';
}
/** No answer in time (connect, headers or body timeout). */
export class ApiTimeoutError extends ApiError {
  readonly code = 'API_TIMEOUT';
}
/** The connection failed or was cut. */
export class ApiNetworkError extends ApiError {
  readonly code = 'API_NETWORK';
}
/** A 2xx whose body is not what the interface shows. */
export class ApiBadResponseError extends ApiError {
  readonly code = 'API_BAD_RESPONSE';
}

/**
 * `error` without `secrets` (a row's card number, CVC, password) in its
 * message, its stack or its cause's, nor any card-shaped digit run: an
 * ApiError as a scrubbed copy of the same class, another Error scrubbed in
 * place (it keeps its class), anything else as an Error of its scrubbed text.
 */
export function withoutSecrets(error: unknown, secrets: KnownSecrets): Error {
  const scrub = scrubberFor(secrets);
  if (error instanceof ApiError) return error.scrubbed(scrub);
  if (error instanceof Error) return scrubErrorInPlace(error, scrub);
  return new Error(scrub(String(error)));
}

const isMutating = (method: string): boolean => method !== 'GET' && method !== 'HEAD';

function errorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') return code;
  // undici wraps some socket faults; the system code sits on the cause.
  return errorCode((error as { cause?: unknown }).cause);
}

/**
 * Retry-After is either delta-seconds or an HTTP date (RFC 9110 10.2.3).
 * Returns milliseconds from `now`, never negative; undefined when absent or
 * unreadable.
 */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (text === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  // An HTTP date names its day and month in letters; anything else is unreadable.
  const at = /[A-Za-z]/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}
