/**
 * Who may use the dashboard, and protection of its forms
 * against cross-site requests.
 *
 * - With a token (SUBSYNC_DASHBOARD_TOKEN), every route needs either the
 *   header `Authorization: Bearer <token>` (scripts, Prometheus) or the
 *   session cookie the login form sets. Tokens are compared in constant time
 *   (both sides hashed first, so not even the length leaks).
 * - The session cookie is `<nonce>.<HMAC(key, nonce)>`, HttpOnly and
 *   SameSite=Strict; the key derives from the token, so changing the token
 *   ends every session. With a token, a session is also kept in Redis
 *   (src/dashboard/sessions.ts): it expires there, and logging out ends it.
 * - Forms carry a CSRF token, HMAC(key, "csrf" + nonce) of the session's
 *   nonce, checked on every POST, and a POST whose Origin (or, without one,
 *   Sec-Fetch-Site) is another site is refused. Without a dashboard token
 *   there is still a session cookie, for the CSRF token; its key is random
 *   per process. A request authenticated by the bearer header needs no CSRF
 *   token: a browser never adds that header by itself.
 * - The dashboard answers only requests whose Host is a localhost name, the
 *   address it listens on (every interface's address when it listens on all),
 *   or a name of SUBSYNC_DASHBOARD_HOSTS, so a web page cannot reach it
 *   through DNS rebinding (its Host would be the attacker's name).
 * - Listening beyond loopback needs a token: {@link requireTokenOffLoopback}.
 * - Roles: SUBSYNC_DASHBOARD_TOKENS names tokens, each with a role
 *   ({@link ROLES}: a viewer reads, an operator also retries, edits, cancels
 *   and pauses, an admin also changes schedules and settings). The single
 *   SUBSYNC_DASHBOARD_TOKEN is the user `admin`, with the admin role; a
 *   dashboard without any token (loopback only) lets everyone in as
 *   `anonymous`, an admin. Each route declares the role it needs
 *   ({@link requiredRole}); the server checks it in one hook.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import { SubsyncError } from '../errors.js';

export const SESSION_COOKIE = 'subsync_session';

/** Compares two secrets in constant time, whatever their lengths. */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}

/** Who may do what, weakest first: each role may do everything the ones before it may. */
export const ROLES = ['viewer', 'operator', 'admin'] as const;
export type Role = (typeof ROLES)[number];

/** Whether a user with role `has` may use a route that needs `needs`. */
export const roleAllows = (has: Role, needs: Role): boolean => ROLES.indexOf(has) >= ROLES.indexOf(needs);

/** Methods that only read: a route answering one of them needs the viewer role unless it says otherwise. */
const READING_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * The role a request needs: the one its route declares, else viewer for a
 * read and admin for anything that may change state (a route that forgets
 * to declare its role is closed to viewers and operators, not open to them).
 */
export function requiredRole(method: string, declared: Role | undefined): Role {
  return declared ?? (READING_METHODS.has(method.toUpperCase()) ? 'viewer' : 'admin');
}

/** A person or a script the dashboard knows by its token. */
export interface DashboardUser {
  /** Shown in the page header and recorded as the actor `dashboard:<name>`. */
  name: string;
  role: Role;
}

/** One entry of SUBSYNC_DASHBOARD_TOKENS (`name:role:token`). */
export interface NamedToken extends DashboardUser {
  token: string;
}

/** The user of the single SUBSYNC_DASHBOARD_TOKEN. */
export const SINGLE_TOKEN_USER: DashboardUser = { name: 'admin', role: 'admin' };
/** Everyone, on a dashboard without a token (loopback only). */
export const ANONYMOUS_USER: DashboardUser = { name: 'anonymous', role: 'admin' };

export interface DashboardAuth {
  /** A token is configured: requests must prove it. */
  readonly required: boolean;
  /** The user whose token this is (login form), else undefined. */
  identify(given: string): DashboardUser | undefined;
  /** The user whose token the request's `Authorization` header carries, else undefined. */
  bearerUser(header: string | undefined): DashboardUser | undefined;
  /** The user of that name as configured now (a session remembers a name; its role is read afresh). */
  userNamed(name: string): DashboardUser | undefined;
  /** A new session cookie value. */
  newSession(): string;
  /** The session's nonce when the cookie value is one of ours, else undefined. */
  sessionNonce(cookie: string | undefined): string | undefined;
  /** The CSRF token of a session. */
  csrfToken(nonce: string): string;
  /** Whether `given` is the CSRF token of the session `nonce`. */
  csrfOk(nonce: string, given: string | undefined): boolean;
}

/**
 * The dashboard's users and keys from SUBSYNC_DASHBOARD_TOKEN (`token`, the
 * user `admin`) and SUBSYNC_DASHBOARD_TOKENS (`named`). The session key
 * derives from every token with its name and role, so changing any of them
 * ends every session.
 */
export function createAuth(token: string | undefined, named: readonly NamedToken[] = []): DashboardAuth {
  const users: NamedToken[] = [...(token === undefined ? [] : [{ ...SINGLE_TOKEN_USER, token }]), ...named];
  const required = users.length > 0;
  const key = !required
    ? randomBytes(32)
    : users.length === 1 && token !== undefined
      ? createHash('sha256').update(`subsync-dashboard\0${token}`, 'utf8').digest()
      : createHash('sha256').update(`subsync-dashboard\0${users.map((u) => `${u.name}\0${u.role}\0${u.token}`).sort().join('\0\0')}`, 'utf8').digest();
  const mac = (purpose: string, nonce: string): string => createHmac('sha256', key).update(`${purpose}\0${nonce}`).digest('base64url');
  const identify = (given: string): DashboardUser | undefined => {
    let found: DashboardUser | undefined;
    // Every token is compared, so the time taken does not tell which one matched.
    for (const user of users) if (sameSecret(given, user.token) && found === undefined) found = { name: user.name, role: user.role };
    return found;
  };
  return {
    required,
    identify,
    bearerUser(header) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
      return match?.[1] === undefined ? undefined : identify(match[1]);
    },
    userNamed(name) {
      if (!required) return ANONYMOUS_USER;
      const user = users.find((u) => u.name === name);
      return user && { name: user.name, role: user.role };
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

/**
 * A local path to return to after logging in, else `/`. Only printable ASCII
 * starting with one `/`, no backslash anywhere, and the same once
 * percent-decoded: browsers drop tabs and newlines from a Location and read
 * `\` as `/`, so `/\t/evil.example` or `/%5C/evil.example` would leave the site.
 */
export function safeNext(next: unknown): string {
  if (typeof next !== 'string' || next.length > 2048) return '/';
  const unsafe = (path: string): boolean => !/^\/(?![/\\])/.test(path) || /[^\x21-\x7e]|\\/.test(path);
  if (unsafe(next)) return '/';
  let decoded: string;
  try {
    decoded = decodeURIComponent(next);
  } catch {
    return '/';
  }
  if (!/^\/(?![/\\])/.test(decoded) || /[\x00-\x1f\x7f\\]/.test(decoded)) return '/';
  // A last guard: resolved against any origin, it must stay on that origin.
  const base = 'http://dashboard.invalid';
  return new URL(next, base).origin === base ? next : '/';
}

/** The dashboard is to listen beyond this machine without SUBSYNC_DASHBOARD_TOKEN: refused at start (exit 78). */
export class DashboardNeedsTokenError extends SubsyncError {
  readonly code = 'DASHBOARD_NEEDS_TOKEN';
  constructor(host: string) {
    super(`the dashboard on ${host} (not a loopback address) needs SUBSYNC_DASHBOARD_TOKEN or SUBSYNC_DASHBOARD_TOKENS (16+ characters each, e.g. \`openssl rand -hex 16\`); or listen on 127.0.0.1`);
  }
}

/** Refuses a dashboard bound beyond loopback without a token: anyone who reaches it could read customer data. */
export function requireTokenOffLoopback(host: string, token: string | undefined, named: readonly NamedToken[] = []): void {
  if ((token === undefined || token === '') && named.length === 0 && !isLoopback(host)) throw new DashboardNeedsTokenError(host);
}

const WILDCARD_ADDRESSES: ReadonlySet<string> = new Set(['0.0.0.0', '::', '[::]']);

/**
 * The Host names the dashboard answers to: localhost names, the address it
 * listens on (for 0.0.0.0 or ::, the address of every interface of this
 * machine), and `extra` (SUBSYNC_DASHBOARD_HOSTS). Lower case, IPv6 in brackets.
 */
export function allowedHosts(bound: string, extra: readonly string[]): ReadonlySet<string> {
  const hosts = new Set<string>(['localhost', '127.0.0.1', '[::1]']);
  const add = (address: string): void => {
    const name = address.toLowerCase();
    hosts.add(name.includes(':') && !name.startsWith('[') ? `[${name}]` : name);
  };
  if (WILDCARD_ADDRESSES.has(bound)) {
    for (const entries of Object.values(networkInterfaces())) for (const entry of entries ?? []) add(entry.address.replace(/%.*$/, ''));
  } else {
    add(bound);
  }
  for (const name of extra) add(name);
  return hosts;
}

/** Whether a Host header names one of `allowed` (any port), or a loopback address. */
export function hostAllowed(header: string | undefined, allowed: ReadonlySet<string>): boolean {
  if (header === undefined || header === '') return false;
  const name = hostName(header).toLowerCase();
  return allowed.has(name) || /^127\.\d+\.\d+\.\d+$/.test(name);
}
