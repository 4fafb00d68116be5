/**
 * The retry dashboard: server-rendered pages on fastify,
 * bull-board at /queues, Prometheus at /metrics, every route behind
 * SUBSYNC_DASHBOARD_TOKEN or SUBSYNC_DASHBOARD_TOKENS when set
 * (src/dashboard/auth.ts), each route needing the role it declares.
 *
 * Every request's Host must be one the dashboard answers to (DNS
 * rebinding); listening beyond loopback needs the token; sessions live in
 * Redis (src/dashboard/sessions.ts); bull-board is read-only.
 *
 * Routes (all GET unless said):
 * - `/` imports, live progress; `/api/imports`, `/api/imports/:id` (JSON polled by the pages)
 * - `/imports/:id` an import, its activity charts and its rows that did not succeed; POST `/imports/:id/retry`;
 *   POST `/imports/:id/pause`, `/imports/:id/resume`, `/imports/:id/cancel` (operator actions, as retry)
 * - `/history` every import by state, a page at a time; `/find?q=` rows by email, name or id; `/api/history`
 * - `/imports/:id/rows/:row` edit a row; POST the same to save and retry it
 * - `/imports/:id/results.csv`, `/imports/:id/errors.csv`, `/imports/:id/unprocessed.csv` downloads (formula-escaped, every cell quoted)
 * - `/exports`, `/exports/:name` runs, manifests, downloads; the schedule
 * - `/queue-health`, `/api/queue-health`
 * - `/audit` the audit trail (src/audit/trail.ts)
 * - `/metrics` Prometheus text
 * - `/queues` bull-board (read-only)
 * - `/login` (GET, POST), POST `/logout`; `/assets/dashboard.css` (public: the login page uses it), `/assets/dashboard.js`
 */
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import fastifyCookie from '@fastify/cookie';
import fastifyFormbody from '@fastify/formbody';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { z } from 'zod';
import { isServerErrorStatus } from '../policy.js';
import type { Runtime } from '../runtime.js';
import { DASHBOARD_CSS, DASHBOARD_JS } from './assets.js';
import { allowedHosts, ANONYMOUS_USER, createAuth, hostAllowed, requiredRole, requireTokenOffLoopback, roleAllows, safeNext, sameOrigin, SESSION_COOKIE, type DashboardAuth, type NamedToken, type Role } from './auth.js';
import { auditRoutes } from './audit.js';
import { PAGE_CSP, sendPage, type DashboardContext, type Session } from './context.js';
import { html, page } from './html.js';
import { historyRoutes } from './history.js';
import { importRoutes } from './imports.js';
import { createScrape } from './metrics.js';
import { pageRoutes } from './pages.js';
import { redisLoginThrottle, redisSessions, SESSION_SECONDS, type LoginThrottle, type SessionStore } from './sessions.js';

export interface DashboardOptions {
  runtime: Runtime;
  /** The address to listen on; 127.0.0.1 unless told otherwise (`--host`). */
  host: string;
  /** 0 picks a free port (read it back from `url`). */
  port: number;
  /** SUBSYNC_DASHBOARD_TOKEN: when set, every route requires it (or a named token); required unless `host` is a loopback address. */
  token?: string;
  /** SUBSYNC_DASHBOARD_TOKENS: named tokens, each with its role; default the runtime's configuration. */
  tokens?: readonly NamedToken[];
  /** SUBSYNC_DASHBOARD_HOSTS: Host names answered besides localhost names and the bound address. */
  hosts?: readonly string[];
}

export interface Dashboard {
  /** Where it listens, e.g. `http://127.0.0.1:8080`. */
  url: string;
  close(): Promise<void>;
}

/** Paths served without the token: the login form and the stylesheet it uses. */
const PUBLIC_PATHS: ReadonlySet<string> = new Set(['/login', '/assets/dashboard.css']);
/** bull-board's pages and their API reads; anything else there (retry, clean, pause, add) is refused. */
const READ_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD']);
const UNSAFE_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
const LoginFormSchema = z.object({ token: z.string().default(''), next: z.string().optional() });

export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const { runtime } = options;
  const token = options.token === '' ? undefined : options.token;
  const named = options.tokens ?? runtime.config.dashboardTokens;
  requireTokenOffLoopback(options.host, token, named);
  const auth = createAuth(token, named);
  const sessions = redisSessions(runtime.redis, runtime.config.queuePrefix);
  const throttle = redisLoginThrottle(runtime.redis, runtime.config.queuePrefix);
  const hosts = allowedHosts(options.host, options.hosts ?? runtime.config.dashboardHosts);
  const ctx: DashboardContext = { runtime, auth };
  const logger: FastifyBaseLogger = runtime.logger.child({ component: 'dashboard' });
  const app = Fastify({
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    // Behind a proxy, run it on the same machine; the Host check and the login throttle use the request as received.
    trustProxy: false,
  });
  await app.register(fastifyCookie);
  await app.register(fastifyFormbody);
  app.decorateRequest('dashboardSession', null);

  app.addHook('onRequest', async (request, reply) => {
    // Personal data on every page: nothing is cached, nothing is framed.
    reply.header('cache-control', 'no-store').header('x-content-type-options', 'nosniff').header('x-frame-options', 'DENY').header('referrer-policy', 'same-origin');
    // Always, whatever the address: a page of another site reaching here through DNS rebinding sends its own name.
    if (!hostAllowed(request.headers.host, hosts)) {
      return reply.code(421).type('text/plain').send('this dashboard does not answer to that host name (add it to SUBSYNC_DASHBOARD_HOSTS)\n');
    }
    const path = request.url.split('?')[0] ?? '/';
    if (auth.required && request.headers.authorization !== undefined) {
      const wait = await throttle.blockedFor(request.ip);
      if (wait > 0) return tooManyAttempts(reply, wait);
    }
    const session = await sessionOf(auth, sessions, throttle, request, reply);
    request.dashboardSession = session ?? null;
    if (session === undefined && !PUBLIC_PATHS.has(path)) return unauthorized(request, reply);
    // bull-board is for looking: a retry there would skip the ledger, and a control job could be made to write files anywhere.
    if ((path === '/queues' || path.startsWith('/queues/')) && !READ_METHODS.has(request.method)) {
      return reply.code(403).type('text/plain').send('bull-board is read-only here: retry rows from the import\'s page\n');
    }
    // The one place roles are enforced: the route's declared role, else viewer for reads and admin for anything else.
    const needs = requiredRole(request.method, request.routeOptions.config?.role);
    if (session !== undefined && !roleAllows(session.user.role, needs)) return forbidden(request, reply, session.user.name, session.user.role, needs);
    return undefined;
  });
  // After the body is parsed: forms carry their CSRF token in it.
  app.addHook('preHandler', async (request, reply) => {
    if (!UNSAFE_METHODS.has(request.method)) return undefined;
    if (!sameOrigin(request.headers)) return reply.code(403).type('text/plain').send('cross-site request refused\n');
    const session = request.dashboardSession;
    const path = request.url.split('?')[0] ?? '/';
    // bull-board's own API calls (fetch, JSON) carry no form token: the Origin check above and the SameSite=Strict cookie guard them.
    if (session === null || session.viaBearer || path === '/login' || path.startsWith('/queues/')) return undefined;
    const given = csrfField(request.body) ?? headerText(request.headers['x-csrf-token']);
    if (session.nonce === undefined || !auth.csrfOk(session.nonce, given)) {
      return reply.code(403).type('text/plain').send('missing or stale form token: reload the page and try again\n');
    }
    return undefined;
  });

  // Set before the routes: a route takes the error handler in place when it is added.
  app.setNotFoundHandler((request, reply) => sendPage(ctx, request, reply, { title: 'Not found', body: html`<p>Nothing at <code>${request.url}</code>. <a href="/">Imports</a></p>` }, 404));
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const status = error instanceof z.ZodError ? 400 : (error.statusCode ?? 500);
    // The dashboard's own fault: logged, and its details kept off the page.
    const fault = isServerErrorStatus(status);
    if (fault) request.log.error({ err: error, url: request.url }, 'dashboard request failed');
    const text = fault ? 'Something went wrong; the details are in the log.' : error instanceof z.ZodError ? 'The request is malformed.' : error.message;
    return sendPage(ctx, request, reply, { title: fault ? 'Error' : 'Bad request', body: html`<p>${text}</p>` }, status);
  });

  app.get('/assets/dashboard.css', async (_request, reply) => reply.type('text/css; charset=utf-8').send(DASHBOARD_CSS));
  app.get('/assets/dashboard.js', async (_request, reply) => reply.type('text/javascript; charset=utf-8').send(DASHBOARD_JS));

  app.get('/login', async (request, reply) => {
    if (request.dashboardSession?.nonce !== undefined || !auth.required) return reply.redirect(safeNext(query(request).next), 303);
    return sendLogin(reply, safeNext(query(request).next), undefined, 200);
  });
  // Anyone may log in (as another user too): no role needed beyond being here.
  app.post('/login', { config: { role: 'viewer' } }, async (request, reply) => {
    const form = LoginFormSchema.safeParse(request.body);
    const next = safeNext(form.success ? form.data.next : undefined);
    if (!auth.required) return reply.redirect(next, 303);
    const wait = await throttle.blockedFor(request.ip);
    if (wait > 0) {
      // The form again, saying how long to wait: a person at a browser reads this one.
      reply.header('retry-after', String(retryAfterSeconds(wait)));
      return sendLogin(reply, next, `Too many wrong tokens from this address: try again in ${retryAfterSeconds(wait)} s.`, 429);
    }
    const user = form.success ? auth.identify(form.data.token) : undefined;
    if (user === undefined) {
      await throttle.failed(request.ip);
      runtime.logger.warn({ component: 'dashboard', ip: request.ip }, 'dashboard login refused: wrong token');
      return sendLogin(reply, next, 'That is not the dashboard token.', 401);
    }
    const cookie = auth.newSession();
    const nonce = auth.sessionNonce(cookie);
    if (nonce !== undefined) await sessions.open(nonce, user.name);
    setSessionCookie(reply, cookie, request);
    return reply.redirect(next, 303);
  });
  app.post('/logout', { config: { role: 'viewer' } }, async (request, reply) => {
    // Ended on the server: the cookie, even copied elsewhere, is no session any more.
    const nonce = request.dashboardSession?.nonce;
    if (auth.required && nonce !== undefined) await sessions.end(nonce);
    reply.clearCookie(SESSION_COOKIE, { path: '/' });
    return auth.required ? reply.redirect('/login', 303) : reply.redirect('/', 303);
  });

  const scrape = createScrape(runtime);
  app.get('/metrics', async (_request, reply) => reply.type(scrape.contentType).send(await scrape.metrics()));

  importRoutes(app, ctx);
  historyRoutes(app, ctx);
  pageRoutes(app, ctx);
  auditRoutes(app, ctx);
  await registerBullBoard(app, runtime);

  await app.listen({ host: options.host, port: options.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  const shownHost = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    url: `http://${shownHost}:${port}`,
    close: () => app.close(),
  };

  function sendLogin(reply: FastifyReply, next: string, error: string | undefined, status: number): FastifyReply {
    return reply.code(status).header('content-security-policy', PAGE_CSP).type('text/html; charset=utf-8').send(loginPage(next, error));
  }

  /** 403 for a role that may not: a page for a browser, a line of text for a script. */
  function forbidden(request: FastifyRequest, reply: FastifyReply, name: string, role: Role, needs: Role): FastifyReply {
    const text = `${name} has the ${role} role, and this needs ${needs}: nothing was changed (roles: SUBSYNC_DASHBOARD_TOKENS)`;
    request.log.info({ user: name, role, needs, method: request.method, url: request.url }, 'dashboard request refused for its role');
    if (!(request.headers.accept ?? '').includes('text/html')) return reply.code(403).type('text/plain').send(`${text}\n`);
    return sendPage(ctx, request, reply, { title: 'Not allowed', body: html`<p class="notice error" data-refused>${text}.</p><p><a href="/">Imports</a></p>` }, 403);
  }
}

function loginPage(next: string, error?: string): string {
  const body = html`<form method="post" action="/login" class="login">
<p>This dashboard needs a token (SUBSYNC_DASHBOARD_TOKEN, or yours of SUBSYNC_DASHBOARD_TOKENS).</p>
${error ? html`<p class="notice error">${error}</p>` : undefined}
<label>Token<input type="password" name="token" autocomplete="current-password" autofocus required></label>
<input type="hidden" name="next" value="${next}">
<button type="submit" class="primary">Log in</button>
</form>`;
  return page({ title: 'Log in', body });
}

/**
 * Who the request is: undefined when a token is required and neither the
 * bearer header nor a valid session cookie proves it. Without a token,
 * everyone is let in, and a session cookie is handed out for the CSRF token.
 */
async function sessionOf(auth: DashboardAuth, sessions: SessionStore, throttle: LoginThrottle, request: FastifyRequest, reply: FastifyReply): Promise<Session | undefined> {
  const signed = auth.sessionNonce(request.cookies[SESSION_COOKIE]);
  if (auth.required) {
    // A signed cookie is a session only while the server still holds it (not logged out, not expired), and its user still exists.
    const name = signed === undefined ? undefined : await sessions.userOf(signed);
    const sessionUser = name === undefined ? undefined : auth.userNamed(name);
    const nonce = sessionUser === undefined ? undefined : signed;
    const bearer = auth.bearerUser(request.headers.authorization);
    // The bearer header says who the request is, whatever the cookie (its nonce still serves the form token).
    if (bearer !== undefined) return { nonce, viaBearer: true, user: bearer };
    // A wrong bearer token is a guess like a wrong login.
    if (request.headers.authorization !== undefined) await throttle.failed(request.ip);
    return nonce === undefined || sessionUser === undefined ? undefined : { nonce, viaBearer: false, user: sessionUser };
  }
  const nonce = signed;
  if (nonce !== undefined) return { nonce, viaBearer: false, user: ANONYMOUS_USER };
  const cookie = auth.newSession();
  setSessionCookie(reply, cookie, request);
  return { nonce: auth.sessionNonce(cookie), viaBearer: false, user: ANONYMOUS_USER };
}

function setSessionCookie(reply: FastifyReply, value: string, request: FastifyRequest): void {
  reply.setCookie(SESSION_COOKIE, value, { path: '/', httpOnly: true, sameSite: 'strict', secure: request.protocol === 'https', maxAge: SESSION_SECONDS });
}

const retryAfterSeconds = (waitMs: number): number => Math.max(1, Math.ceil(waitMs / 1000));

/** 429 after too many wrong tokens from one address, with when to try again. */
function tooManyAttempts(reply: FastifyReply, waitMs: number): FastifyReply {
  const seconds = retryAfterSeconds(waitMs);
  return reply.code(429).header('retry-after', String(seconds)).type('text/plain').send(`too many wrong tokens from this address: try again in ${seconds} s\n`);
}

/** 401: the login form for a browser asking for a page, a line of text for everything else. */
function unauthorized(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.code(401).header('www-authenticate', 'Bearer realm="subsync dashboard"');
  const wantsPage = request.method === 'GET' && (request.headers.accept ?? '').includes('text/html');
  if (!wantsPage) return reply.type('text/plain').send('authentication required: Authorization: Bearer <SUBSYNC_DASHBOARD_TOKEN>, or log in at /login\n');
  return reply.header('content-security-policy', PAGE_CSP).type('text/html; charset=utf-8').send(loginPage(safeNext(request.url)));
}

/**
 * bull-board at /queues, behind the same hooks, every queue read-only (and
 * the hook above refuses any other method than GET there). A row is retried
 * from the import's page, which reopens its ledger entry (a job retried
 * behind the ledger's back would find its row settled and do nothing). The
 * control queue is read-only too: its jobs carry options such as an export's
 * output folder, and a retried or duplicated job would write the whole
 * customer export wherever its data says.
 */
async function registerBullBoard(app: FastifyInstance, runtime: Runtime): Promise<void> {
  const adapter = new FastifyAdapter();
  adapter.setBasePath('/queues');
  createBullBoard({
    queues: [new BullMQAdapter(runtime.queues.rows, { readOnlyMode: true }), new BullMQAdapter(runtime.queues.control, { readOnlyMode: true })],
    serverAdapter: adapter,
    options: { uiConfig: { boardTitle: 'subsync' } },
  });
  await app.register(adapter.registerPlugin(), { prefix: '/queues' });
}

const query = (request: FastifyRequest): { next?: string } => {
  const parsed = z.object({ next: z.string().optional() }).safeParse(request.query);
  return parsed.success ? parsed.data : {};
};

const CsrfFieldSchema = z.object({ _csrf: z.string() });
const csrfField = (body: unknown): string | undefined => {
  const parsed = CsrfFieldSchema.safeParse(body);
  return parsed.success ? parsed.data._csrf : undefined;
};

const headerText = (value: string | string[] | undefined): string | undefined => (Array.isArray(value) ? value[0] : value);
