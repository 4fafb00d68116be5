import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Runtime } from '../runtime.js';
import type { DashboardAuth, DashboardUser, Role } from './auth.js';
import { page, type PageOptions } from './html.js';

/** Who is asking, decided once per request by the auth hook. */
export interface Session {
  /** The session cookie's nonce (the CSRF token derives from it); undefined for a bearer-only client. */
  nonce: string | undefined;
  /** Authenticated by the `Authorization: Bearer` header: no CSRF token needed. */
  viaBearer: boolean;
  /** Whose token it is, and the role it has now. */
  user: DashboardUser;
}

declare module 'fastify' {
  interface FastifyRequest {
    dashboardSession: Session | null;
  }
  interface FastifyContextConfig {
    /**
     * The role a route needs (src/dashboard/auth.ts): declared beside the
     * route, checked in one hook. Unset: viewer for GET and HEAD, admin for
     * any other method.
     */
    role?: Role;
  }
}

/** Who acted, as the audit trail records it: `dashboard:<user>` and the role. */
export function actorOf(request: FastifyRequest): { actor: string; role: Role } {
  const user = request.dashboardSession?.user;
  return user === undefined ? { actor: 'dashboard:unknown', role: 'viewer' } : { actor: `dashboard:${user.name}`, role: user.role };
}

/** What every route module receives. */
export interface DashboardContext {
  runtime: Runtime;
  auth: DashboardAuth;
}

/** Only same-origin script, style and forms; never framed. */
export const PAGE_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** The CSRF token to put in this request's forms ('' for a bearer-only client, who needs none). */
export function csrfOf(ctx: DashboardContext, request: FastifyRequest): string {
  const nonce = request.dashboardSession?.nonce;
  return nonce === undefined ? '' : ctx.auth.csrfToken(nonce);
}

/** Sends a whole page, with the CSRF token for its forms and the page CSP. */
export function sendPage(ctx: DashboardContext, request: FastifyRequest, reply: FastifyReply, options: Omit<PageOptions, 'csrf' | 'loggedIn'>, status = 200): FastifyReply {
  const user = ctx.auth.required ? request.dashboardSession?.user : undefined;
  const body = page({ ...options, csrf: csrfOf(ctx, request), loggedIn: ctx.auth.required && request.dashboardSession?.nonce !== undefined, ...(user ? { user: `${user.name} (${user.role})` } : {}) });
  return reply.code(status).header('content-security-policy', PAGE_CSP).type('text/html; charset=utf-8').send(body);
}

/** A notice carried across a redirect (POST, then GET): `?notice=…&kind=error`. */
export function noticeOf(query: unknown): { notice?: string; noticeKind?: 'ok' | 'error' } {
  if (typeof query !== 'object' || query === null) return {};
  const notice = 'notice' in query && typeof query.notice === 'string' ? query.notice.slice(0, 2000) : undefined;
  const kind = 'kind' in query && query.kind === 'error' ? 'error' : 'ok';
  return notice ? { notice, noticeKind: kind } : {};
}

export function redirectWithNotice(reply: FastifyReply, to: string, notice: string, kind: 'ok' | 'error' = 'ok'): FastifyReply {
  const query = new URLSearchParams({ notice, ...(kind === 'error' ? { kind } : {}) });
  return reply.redirect(`${to}?${query.toString()}`, 303);
}
