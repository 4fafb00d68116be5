import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { z } from 'zod';
import type { Endpoint } from '../api/errors.js';
import {
  CreateCustomerRequestSchema,
  SearchQuerySchema,
  SignupRequestSchema,
  UpdateCustomerRequestSchema,
  UpdatePaymentMethodRequestSchema,
  describeZodError,
} from '../api/schemas/index.js';
import { NO_FAULTS, SandboxFaultsPatchSchema, SlidingSecond, SlidingWindowLimiter, cardEchoMessage, countRequest, emptyStats, type SandboxFaults, type SandboxStats } from './faults.js';
import { SandboxRefusal, createStore, type SandboxStore } from './store.js';

export type { SandboxFaults, SandboxStats } from './faults.js';

/** The Message of every successful answer: the sandbox's success indicator. */
export const SANDBOX_SUCCESS_MESSAGE = 'OK';

/** The endpoints whose requests carry card data: what the echoCardData fault quotes. */
const CARD_ENDPOINTS: ReadonlySet<Endpoint> = new Set(['signUp', 'updatePaymentMethod']);

/** Request bodies larger than this are refused with 413. */
const MAX_BODY_BYTES = 1024 * 1024;

export interface SandboxOptions {
  /** Default 0: a free port, read back from `url`. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  faults?: Partial<SandboxFaults>;
  /** When set, every /json request must carry exactly this Authorization header, else 401. */
  auth?: string;
  /** Seed the customers owning the fixed payment-method keys. Default true. Offers are always seeded. */
  seed?: boolean;
  /** People of the population (population.ts) seeded after those, CollectionMethod Invoice. Default 0. */
  seedCustomers?: number;
  /** Which population they come from. Default 1. */
  seedRandom?: number;
  logger?: Logger;
  /** Source of randomness for the probabilistic faults. Default Math.random. */
  random?: () => number;
}

/** A /json request as the test hook of {@link Sandbox.intercept} sees it. */
export interface SandboxRequest {
  endpoint: Endpoint;
  method: string;
  query: URLSearchParams;
}

/**
 * Called with every /json request that reached a route, after faults and
 * just before it is handled. It may change the store (a customer created in
 * the middle of an export) or throw a SandboxRefusal to refuse the request
 * (a service that refuses an empty search); anything it records is the test's
 * own request log.
 */
export type SandboxInterceptor = (request: SandboxRequest) => void;

export interface Sandbox {
  readonly url: string;
  readonly port: number;
  readonly store: SandboxStore;
  faults(): SandboxFaults;
  setFaults(faults: Partial<SandboxFaults>): void;
  stats(): SandboxStats;
  resetStats(): void;
  /** Installs (or, with undefined, removes) the test hook of {@link SandboxInterceptor}. */
  intercept(hook: SandboxInterceptor | undefined): void;
  close(): Promise<void>;
}

interface Route {
  endpoint: Endpoint;
  mutating: boolean;
  handle(input: { params: string[]; query: URLSearchParams; body: unknown }): Record<string, unknown>;
}

/**
 * Starts the in-memory sandbox on real HTTP. Routes not
 * under /json: `GET /_sandbox/stats` (with the number of customers;
 * `DELETE` starts counting again),
 * `GET|PUT /_sandbox/faults` (switch faults at run time, for a sandbox in
 * another process), `GET /_sandbox/customers` (every customer, for checks) and
 * `GET /_sandbox/duplicates` (identities held by several customers); these
 * are never faulted.
 */
export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const store = createStore({ seed: options.seed ?? true, seedCustomers: options.seedCustomers, seedRandom: options.seedRandom });
  let faults: SandboxFaults = { ...NO_FAULTS, ...options.faults };
  let stats = emptyStats();
  // The requests of the last second, beside the stats: their fullest second.
  let lastSecond = new SlidingSecond();
  const limiter = new SlidingWindowLimiter();
  const random = options.random ?? Math.random;
  const log = options.logger;
  let interceptor: SandboxInterceptor | undefined;

  const routes = buildRoutes(store);

  async function handleJson(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const match = matchRoute(routes, req.method ?? 'GET', url.pathname);
    if (match === 'method-not-allowed') return answer(res, 405, { Message: `Method ${req.method} is not allowed on ${url.pathname}` });
    if (!match) return answer(res, 404, { Message: `No such resource: ${url.pathname}` });
    const { route, params } = match;

    countRequest(stats, Date.now(), lastSecond);
    stats.byEndpoint[route.endpoint] = (stats.byEndpoint[route.endpoint] ?? 0) + 1;

    if (faults.latencyMs > 0) await sleep(faults.latencyMs);
    if (faults.rateLimit > 0) {
      const waitSeconds = limiter.tryAdmit(faults.rateLimit, Date.now());
      if (waitSeconds > 0) {
        stats.faults.rateLimited++;
        return answer(res, 429, { Message: 'Too many requests' }, { 'retry-after': String(waitSeconds) });
      }
    }
    if (options.auth !== undefined && req.headers.authorization !== options.auth) {
      return answer(res, 401, { Message: 'Not authorised' });
    }
    if (faults.errorRate > 0 && random() < faults.errorRate) {
      stats.faults.error5xx++;
      return answer(res, 503, { Message: 'Service temporarily unavailable' });
    }

    let body: unknown;
    if (route.mutating) {
      const read = await readJsonBody(req);
      if (!read.ok) return answer(res, read.status, { Message: read.message });
      body = read.body;
    }

    if (faults.echoCardData > 0 && CARD_ENDPOINTS.has(route.endpoint) && random() < faults.echoCardData) {
      const message = cardEchoMessage(body, faults.echoCardDataStatus);
      if (message !== undefined) {
        stats.faults.echoedCardData++;
        return answer(res, faults.echoCardDataStatus, { Message: message });
      }
    }

    let result: Record<string, unknown>;
    try {
      interceptor?.({ endpoint: route.endpoint, method: req.method ?? 'GET', query: url.searchParams });
      result = route.handle({ params, query: url.searchParams, body });
    } catch (error) {
      if (error instanceof SandboxRefusal) return answer(res, error.status, { Message: error.message });
      throw error;
    }

    if (route.mutating) {
      stats.applied++;
      if (faults.dropAfterCommitRate > 0 && random() < faults.dropAfterCommitRate) {
        // Applied, and the caller never hears: the connection is cut unanswered.
        stats.faults.droppedAfterCommit++;
        stats.byStatus.dropped = (stats.byStatus.dropped ?? 0) + 1;
        req.socket.destroy();
        return;
      }
      if (faults.errorAfterApplyRate > 0 && random() < faults.errorAfterApplyRate) {
        stats.faults.error5xxAfterApply++;
        return answer(res, 500, { Message: 'Internal error' });
      }
    }
    answer(res, 200, { Message: SANDBOX_SUCCESS_MESSAGE, ...result });
  }

  function handleAdmin(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> | void {
    if (url.pathname === '/_sandbox/stats' && (req.method === 'GET' || req.method === 'DELETE')) {
      // DELETE starts counting again (the customers stay): one sandbox measures several runs, each from its first request.
      if (req.method === 'DELETE') resetStats();
      return answer(res, 200, { ...stats, customers: store.customerCount() }, undefined, false);
    }
    if (url.pathname === '/_sandbox/customers' && req.method === 'GET') return answer(res, 200, { Customers: store.customers() }, undefined, false);
    if (url.pathname === '/_sandbox/duplicates' && req.method === 'GET') {
      const identities = store.duplicateIdentities();
      return answer(res, 200, { count: identities.length, identities }, undefined, false);
    }
    if (url.pathname === '/_sandbox/faults' && req.method === 'GET') return answer(res, 200, faults, undefined, false);
    if (url.pathname === '/_sandbox/faults' && req.method === 'PUT') {
      return readJsonBody(req).then((read) => {
        if (!read.ok) return answer(res, read.status, { Message: read.message }, undefined, false);
        const patch = SandboxFaultsPatchSchema.safeParse(read.body);
        if (!patch.success) return answer(res, 400, { Message: `Invalid faults: ${describeZodError(patch.error)}` }, undefined, false);
        faults = { ...faults, ...patch.data };
        answer(res, 200, faults, undefined, false);
      });
    }
    return answer(res, 404, { Message: `No such resource: ${url.pathname}` }, undefined, false);
  }

  function resetStats(): void {
    stats = emptyStats();
    lastSecond = new SlidingSecond();
  }

  function answer(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}, counted = true): void {
    if (counted) stats.byStatus[status] = (stats.byStatus[status] ?? 0) + 1;
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
    res.end(text);
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://sandbox');
    const work = url.pathname.startsWith('/_sandbox/') ? handleAdmin(req, res, url) : handleJson(req, res, url);
    Promise.resolve(work).catch((error: unknown) => {
      log?.error({ err: error }, 'sandbox handler failed');
      if (!res.headersSent) answer(res, 500, { Message: 'Internal error' });
      else res.destroy();
    });
  });
  // Longer than the client's keep-alive, so the client always closes idle sockets first.
  server.keepAliveTimeout = 10_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  log?.info({ port: address.port }, 'sandbox listening');

  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    store,
    faults: () => ({ ...faults }),
    setFaults(next) {
      const patch = SandboxFaultsPatchSchema.safeParse(next);
      if (!patch.success) throw new RangeError(`Invalid faults: ${describeZodError(patch.error)}`);
      faults = { ...faults, ...patch.data };
    },
    stats: () => structuredClone(stats),
    resetStats,
    intercept(hook) {
      interceptor = hook;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
}

function buildRoutes(store: SandboxStore): Array<{ method: string; pattern: RegExp; route: Route }> {
  const parse = <S extends z.ZodType>(schema: S, body: unknown, what: string): z.infer<S> => {
    const result = schema.safeParse(body);
    if (!result.success) throw new SandboxRefusal(400, `Invalid ${what}: ${describeZodError(result.error)}`);
    return result.data;
  };
  const param = (params: string[], i: number): string => decodeURIComponent(params[i] ?? '');

  return [
    {
      method: 'GET',
      pattern: /^\/json\/customers\/?$/,
      route: {
        endpoint: 'searchCustomers',
        mutating: false,
        handle: ({ query }) => {
          const missing = ['contains', 'skip', 'take'].filter((name) => !query.has(name));
          if (missing.length > 0) throw new SandboxRefusal(400, `Missing query parameter(s): ${missing.join(', ')}`);
          const skip = query.get('skip') ?? '';
          const take = query.get('take') ?? '';
          if (!/^\d+$/.test(skip) || !/^\d+$/.test(take)) throw new SandboxRefusal(400, 'skip and take must be non-negative integers');
          const parsed = parse(SearchQuerySchema, { contains: query.get('contains') ?? '', skip: Number(skip), take: Number(take) }, 'search query');
          return store.searchCustomers(parsed);
        },
      },
    },
    {
      method: 'GET',
      pattern: /^\/json\/customers\/([^/]+)$/,
      route: { endpoint: 'getCustomer', mutating: false, handle: ({ params }) => ({ Customer: store.getCustomer(param(params, 0)) }) },
    },
    {
      method: 'POST',
      pattern: /^\/json\/customers\/?$/,
      route: {
        endpoint: 'createCustomer',
        mutating: true,
        handle: ({ body }) => ({ CustomerID: store.createCustomer(parse(CreateCustomerRequestSchema, body, 'customer')).CustomerID }),
      },
    },
    {
      method: 'PUT',
      pattern: /^\/json\/customers\/([^/]+)$/,
      route: {
        endpoint: 'updateCustomer',
        mutating: true,
        handle: ({ params, body }) => ({
          CustomerID: store.updateCustomer(param(params, 0), parse(UpdateCustomerRequestSchema, body, 'customer')).CustomerID,
        }),
      },
    },
    {
      method: 'GET',
      pattern: /^\/json\/offers\/([^/]+)$/,
      route: { endpoint: 'getOffer', mutating: false, handle: ({ params }) => ({ Offer: store.getOffer(param(params, 0)) }) },
    },
    {
      method: 'POST',
      pattern: /^\/json\/signups\/?$/,
      route: {
        endpoint: 'signUp',
        mutating: true,
        handle: ({ body }) => {
          const { customer, subscription } = store.signUp(parse(SignupRequestSchema, body, 'sign-up'));
          return { CustomerID: customer.CustomerID, SubscriptionID: subscription.SubscriptionID };
        },
      },
    },
    {
      method: 'PUT',
      pattern: /^\/json\/paymentmethods\/([^/]+)$/,
      route: {
        endpoint: 'updatePaymentMethod',
        mutating: true,
        handle: ({ params, body }) => {
          const request = parse(UpdatePaymentMethodRequestSchema, body, 'payment method');
          return { PaymentMethodKey: store.updatePaymentMethod(param(params, 0), request.CreditCard).PaymentMethodKey };
        },
      },
    },
  ];
}

function matchRoute(
  routes: ReturnType<typeof buildRoutes>,
  method: string,
  path: string,
): { route: Route; params: string[] } | 'method-not-allowed' | undefined {
  let pathKnown = false;
  for (const candidate of routes) {
    const m = candidate.pattern.exec(path);
    if (!m) continue;
    pathKnown = true;
    if (candidate.method === method) return { route: candidate.route, params: m.slice(1) };
  }
  return pathKnown ? 'method-not-allowed' : undefined;
}

type BodyRead = { ok: true; body: unknown } | { ok: false; status: number; message: string };

async function readJsonBody(req: IncomingMessage): Promise<BodyRead> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = chunk as Buffer;
    size += buffer.length;
    if (size > MAX_BODY_BYTES) return { ok: false, status: 413, message: `Request body larger than ${MAX_BODY_BYTES} bytes` };
    chunks.push(buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return { ok: false, status: 400, message: 'Request body is empty; a JSON object is expected' };
  try {
    return { ok: true, body: JSON.parse(text) as unknown };
  } catch {
    return { ok: false, status: 400, message: 'Request body is not valid JSON' };
  }
}
