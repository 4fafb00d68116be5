import { Pool } from 'undici';
import type { z } from 'zod';
import { HTTP_DEFAULTS } from '../policy.js';
import { ApiError, type Endpoint } from './errors.js';
import type { KnownSecrets } from '../secrets.js';
import {
  CreateCustomerResponseSchema,
  ErrorBodySchema,
  describeZodError,
  GetCustomerResponseSchema,
  GetOfferResponseSchema,
  SearchCustomersResponseSchema,
  SignupResponseSchema,
  UpdateCustomerResponseSchema,
  UpdatePaymentMethodResponseSchema,
  type CreateCustomerRequest,
  type CreateCustomerResponse,
  type GetCustomerResponse,
  type GetOfferResponse,
  type SearchCustomersResponse,
  type SearchQuery,
  type SignupRequest,
  type SignupResponse,
  type UpdateCustomerRequest,
  type UpdateCustomerResponse,
  type UpdatePaymentMethodRequest,
  type UpdatePaymentMethodResponse,
} from './schemas/index.js';

export interface ApiClientOptions {
  /** The service's base_url; every path begins with /json below it. */
  baseUrl: string;
  /** Value of the Authorization header (the interface does not show its authentication). */
  auth?: string;
  /** Time to connect. Default HTTP_DEFAULTS.connectTimeoutMs (5 s). */
  connectTimeoutMs?: number;
  /** Time to the headers, and between body chunks. Default HTTP_DEFAULTS.requestTimeoutMs (15 s). */
  requestTimeoutMs?: number;
  /** Keep-alive connections in the pool. Default HTTP_DEFAULTS.connections (128). */
  connections?: number;
  /** Awaited before every request leaves: where the fleet-wide API budget is drawn. */
  beforeRequest?: (endpoint: Endpoint) => Promise<void>;
  /** Told of every call once it has ended, for metrics and summaries. */
  onCall?: (call: ApiCall) => void;
}

/** One finished call, as reported to `onCall`. */
export interface ApiCall {
  endpoint: Endpoint;
  method: string;
  status: number | undefined;
  durationMs: number;
  error: ApiError | undefined;
}

/**
 * A typed client for the seven endpoints of the service's interface on one undici
 * keep-alive pool. It never retries: a failure is thrown once as an ApiError
 * that says whether it is transient and whether it may have been applied, and
 * the job that called decides. The error's words never
 * hold the request's card number, CVC or password, whatever the service
 * echoed (src/secrets.ts): they are scrubbed as the error is made, so its
 * stack carries the scrubbed message too.
 */
export interface ApiClient {
  searchCustomers(query: SearchQuery): Promise<SearchCustomersResponse>;
  getCustomer(customerId: string): Promise<GetCustomerResponse>;
  createCustomer(body: CreateCustomerRequest): Promise<CreateCustomerResponse>;
  updateCustomer(customerId: string, body: UpdateCustomerRequest): Promise<UpdateCustomerResponse>;
  getOffer(offerCode: string): Promise<GetOfferResponse>;
  signUp(body: SignupRequest): Promise<SignupResponse>;
  updatePaymentMethod(paymentMethodKey: string, body: UpdatePaymentMethodRequest): Promise<UpdatePaymentMethodResponse>;
  /** Closes the pool; calls in flight are allowed to finish. */
  close(): Promise<void>;
}

export function createApiClient(options: ApiClientOptions): ApiClient {
  const base = new URL(options.baseUrl);
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new TypeError(`API base URL must be http(s): ${options.baseUrl}`);
  }
  const prefix = base.pathname.replace(/\/+$/, '');
  const requestTimeoutMs = options.requestTimeoutMs ?? HTTP_DEFAULTS.requestTimeoutMs;
  const pool = new Pool(base.origin, {
    connections: options.connections ?? HTTP_DEFAULTS.connections,
    connectTimeout: options.connectTimeoutMs ?? HTTP_DEFAULTS.connectTimeoutMs,
    headersTimeout: requestTimeoutMs,
    bodyTimeout: requestTimeoutMs,
    keepAliveTimeout: HTTP_DEFAULTS.keepAliveTimeoutMs,
    // No pipelining: one request per socket at a time, so a cut connection
    // can only leave one request's outcome unknown.
    pipelining: 1,
  });
  const headers: Record<string, string> = { accept: 'application/json' };
  if (options.auth !== undefined) headers.authorization = options.auth;
  // Made once, not per request.
  const jsonHeaders: Record<string, string> = { ...headers, 'content-type': 'application/json' };

  async function call<S extends z.ZodType>(
    endpoint: Endpoint,
    method: 'GET' | 'POST' | 'PUT',
    path: string,
    schema: S,
    body?: unknown,
    secrets: KnownSecrets = [],
    common?: (json: unknown) => z.infer<S> | undefined,
  ): Promise<z.infer<S>> {
    await options.beforeRequest?.(endpoint);
    const started = performance.now();
    let status: number | undefined;
    try {
      let text: string;
      let retryAfter: string | undefined;
      try {
        const response = await pool.request({
          method,
          path: prefix + path,
          headers: body === undefined ? headers : jsonHeaders,
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        status = response.statusCode;
        const header = response.headers['retry-after'];
        retryAfter = Array.isArray(header) ? header[0] : header;
        text = await response.body.text();
      } catch (error) {
        throw ApiError.fromNetworkError({ endpoint, method, error, secrets });
      }
      const json = parseJson(text);
      if (status < 200 || status > 299) {
        const errorBody = ErrorBodySchema.safeParse(json);
        throw ApiError.fromResponse({
          endpoint,
          method,
          status,
          apiMessage: errorBody.success ? errorBody.data.Message : undefined,
          retryAfter,
          secrets,
        });
      }
      let answer = common?.(json);
      if (answer === undefined) {
        const parsed = schema.safeParse(json);
        if (!parsed.success) {
          throw ApiError.badResponse({ endpoint, method, status, problem: json === undefined ? 'not JSON' : describeZodError(parsed.error), secrets });
        }
        answer = parsed.data;
      }
      options.onCall?.({ endpoint, method, status, durationMs: performance.now() - started, error: undefined });
      return answer;
    } catch (error) {
      if (error instanceof ApiError) {
        options.onCall?.({ endpoint, method, status, durationMs: performance.now() - started, error });
      }
      throw error;
    }
  }

  const id = encodeURIComponent;
  return {
    searchCustomers: ({ contains, skip, take }) =>
      call('searchCustomers', 'GET', `/json/customers?contains=${id(contains)}&skip=${skip}&take=${take}`, SearchCustomersResponseSchema),
    getCustomer: (customerId) => call('getCustomer', 'GET', `/json/customers/${id(customerId)}`, GetCustomerResponseSchema),
    createCustomer: (body) => call('createCustomer', 'POST', '/json/customers', CreateCustomerResponseSchema, body, [body.Password], createdAnswer),
    updateCustomer: (customerId, body) =>
      call('updateCustomer', 'PUT', `/json/customers/${id(customerId)}`, UpdateCustomerResponseSchema, body, [body.Password]),
    getOffer: (offerCode) => call('getOffer', 'GET', `/json/offers/${id(offerCode)}`, GetOfferResponseSchema),
    signUp: (body) => call('signUp', 'POST', '/json/signups', SignupResponseSchema, body, [body.CreditCardInfo.AccountNumber, body.CreditCardInfo.CVCode]),
    updatePaymentMethod: (key, body) =>
      call('updatePaymentMethod', 'PUT', `/json/paymentmethods/${id(key)}`, UpdatePaymentMethodResponseSchema, body, [body.CreditCard.AccountNumber, body.CreditCard.CVCode]),
    close: () => pool.close(),
  };
}

/**
 * A create's answer in its common shape, checked by hand (the schema's
 * parse was about 1.5% of a worker's CPU on a batch of creates), as
 * CreateCustomerResponseSchema gives it: its two members only. Undefined
 * for anything else, which the schema then parses, and describes when wrong.
 */
export function createdAnswer(json: unknown): CreateCustomerResponse | undefined {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return undefined;
  const { Message, CustomerID } = json as Record<string, unknown>;
  return typeof Message === 'string' && typeof CustomerID === 'string' && NUMERIC_TEXT.test(CustomerID) ? { Message, CustomerID } : undefined;
}
/** As NumericTextSchema. */
const NUMERIC_TEXT = /^\d+$/;

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
