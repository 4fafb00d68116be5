/**
 * Who may use the dashboard (DESIGN section 9), and protection of its forms
 * against cross-site requests.
 *
 * - With a token (SUBSYNC_DASHBOARD_TOKEN), every route needs either the
 *   header `Authorization: Bearer <token>` (scripts, Prometheus) or the
 *   session cookie the login form sets. Tokens are compared in constant time
 *   (both sides hashed first, so not even the length leaks).
 * - The session cookie is `<nonce>.<HMAC(key, nonce)>`, HttpOnly and
 *   SameSite=Strict; the key derives from the token, so changing the token
 *   ends every session. Nothing is stored server-side.
 * - Forms carry a CSRF token, HMAC(key, "csrf" + nonce) of the session's
 *   nonce, checked on every POST, and a POST whose Origin (or, without one,
 *   Sec-Fetch-Site) is another site is refused. Without a dashboard token
 *   there is still a session cookie, for the CSRF token; its key is random
 *   per process. A request authenticated by the bearer header needs no CSRF
 *   token: a browser never adds that header by itself.
 * - Bound to a loopback address, the dashboard answers only requests whose
 *   Host is a loopback name, so a web page cannot reach it through DNS
 *   rebinding (its Host would be the attacker's name).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SESSION_COOKIE = 'subsync_session';

/** Compares two secrets in constant time, whatever their lengths. */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}

export interface DashboardAuth {
  /** A token is configured: requests must prove it. */
  readonly required: boolean;
  /** The token matches (login form). */
  checkToken(given: string): boolean;
  /** The request's `Authorization` header carries the token. */
  bearerOk(header: string | undefined): boolean;
  /** A new session cookie value. */
  newSession(): string;
  /** The session's nonce when the cookie value is one of ours, else undefined. */
  sessionNonce(cookie: string | undefined): string | undefined;
  /** The CSRF token of a session. */
  csrfToken(nonce: string): string;
  /** Whether `given` is the CSRF token of the session `nonce`. */
  csrfOk(nonce: string, given: string | undefined): boolean;
}

export function createAuth(token: string | undefined): DashboardAuth {
  const key = token === undefined ? randomBytes(32) : createHash('sha256').update(`subsync-dashboard\0${token}`, 'utf8').digest();
  const mac = (purpose: string, nonce: string): string => createHmac('sha256', key).update(`${purpose}\0${nonce}`).digest('base64url');
  return {
    required: token !== undefined,
    checkToken: (given) => token !== undefined && sameSecret(given, token),
    bearerOk(header) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
      return token !== undefined && match?.[1] !== undefined && sameSecret(match[1], token);
    },
    newSession() {
      const nonce = randomBytes(18).toString('base64url');
      return `${nonce}.${mac('session', nonce)}`;
    },
    sessionNonce(cookie) {
      const [nonce, signature, extra] = (cookie ?? '').split('.');
      if (!nonce || !signature || extra !== undefined) return undefined;
      return sameSecret(signature, mac('session', nonce)) ? nonce : undefined;
    },
    csrfToken: (nonce) => mac('csrf', nonce),
    csrfOk: (nonce, given) => given !== undefined && sameSecret(given, mac('csrf', nonce)),
  };
}

const LOOPBACK_NAMES: ReadonlySet<string> = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);

/** Whether `host` (an address to listen on, or a Host header's name) is this machine only. */
export function isLoopback(host: string): boolean {
  return LOOPBACK_NAMES.has(host.toLowerCase()) || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** The name part of a Host header (`[::1]:8080` → `[::1]`, `localhost:80` → `localhost`). */
export function hostName(header: string): string {
  const bracketed = /^(\[[^\]]*\])(?::\d+)?$/.exec(header);
  if (bracketed?.[1] !== undefined) return bracketed[1];
  return header.replace(/:\d+$/, '');
}

/**
 * Whether an unsafe request comes from the dashboard's own pages: its Origin,
 * when sent, names this host; without an Origin, Sec-Fetch-Site, when sent,
 * is same-origin (or none: typed by the user). A client sending neither is
 * not a browser, and cannot be made to send a cookie by another site.
 */
export function sameOrigin(headers: { origin?: string | undefined; host?: string | undefined; 'sec-fetch-site'?: string | undefined }): boolean {
  if (headers.origin !== undefined) {
    try {
      return new URL(headers.origin).host === headers.host;
    } catch {
      return false;
    }
  }
  const site = headers['sec-fetch-site'];
  return site === undefined || site === 'same-origin' || site === 'none';
}

/** A local path to return to after logging in: only paths of this site, never `//elsewhere`. */
export function safeNext(next: unknown): string {
  return typeof next === 'string' && /^\/(?![/\\])/.test(next) ? next : '/';
}
