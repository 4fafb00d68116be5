/**
 * Server-side state of the dashboard's logins, in Redis under the queue
 * prefix, so every dashboard process of a fleet agrees and a restart keeps it:
 *
 * - **Sessions.** A login writes `<prefix>:dashboard:session:<sha256 of the
 *   nonce>` with a TTL of {@link SESSION_SECONDS}; a cookie is a session only
 *   while that key exists. Logging out deletes it, so a copied cookie dies
 *   with the logout, and Redis ends every session after its TTL whatever the
 *   browser keeps. The key holds a hash of the nonce, never the cookie: a
 *   Redis dump gives nothing to log in with (the cookie also needs the
 *   signature, keyed by the token). Its value is the name of the user who
 *   logged in (SUBSYNC_DASHBOARD_TOKENS): the role is read from the
 *   configuration on every request, never from Redis.
 * - **Login throttling.** Wrong tokens (the login form or a bearer header)
 *   count per client address in a fixed window: after
 *   {@link LOGIN_FAILURE_LIMIT} in {@link LOGIN_WINDOW_MS}, that address gets
 *   429 on every token attempt until the window ends, right token or not (a
 *   guess answered differently would still be an oracle).
 */
import { createHash } from 'node:crypto';
import type { RedisClient } from '../redis/redis.js';

/** A session lasts this long; then the browser must log in again. */
export const SESSION_SECONDS = 12 * 3600;
/** Wrong tokens allowed per address per window. */
export const LOGIN_FAILURE_LIMIT = 5;
export const LOGIN_WINDOW_MS = 60_000;

export interface SessionStore {
  /** Records a new session of user `user`: valid for {@link SESSION_SECONDS} unless ended. */
  open(nonce: string, user: string): Promise<void>;
  /** The name of the session's user while it is open on the server, else undefined. */
  userOf(nonce: string): Promise<string | undefined>;
  /** Ends the session (logout). */
  end(nonce: string): Promise<void>;
}

export interface LoginThrottle {
  /** Milliseconds until `address` may try a token again; 0 when it may now. */
  blockedFor(address: string): Promise<number>;
  /** Counts a wrong token from `address`. */
  failed(address: string): Promise<void>;
}

const digest = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

export function redisSessions(redis: RedisClient, prefix: string): SessionStore {
  const key = (nonce: string): string => `${prefix}:dashboard:session:${digest(nonce)}`;
  return {
    async open(nonce, user) {
      await redis.set(key(nonce), `user:${user}`, 'EX', SESSION_SECONDS);
    },
    async userOf(nonce) {
      const value = await redis.get(key(nonce));
      // A session opened before users had names (value "1") is no session: its browser logs in again.
      return value?.startsWith('user:') ? value.slice('user:'.length) : undefined;
    },
    async end(nonce) {
      await redis.del(key(nonce));
    },
  };
}

export function redisLoginThrottle(redis: RedisClient, prefix: string): LoginThrottle {
  // The address is hashed: no client addresses in plain text in Redis, and any address shape makes a valid key.
  const key = (address: string): string => `${prefix}:dashboard:login-failures:${digest(address)}`;
  return {
    async blockedFor(address) {
      const [count, ttl] = await Promise.all([redis.get(key(address)), redis.pttl(key(address))]);
      if (count === null || Number(count) < LOGIN_FAILURE_LIMIT) return 0;
      // A key without a TTL (-1) cannot outlive a window: count it as a full one.
      return ttl > 0 ? ttl : LOGIN_WINDOW_MS;
    },
    async failed(address) {
      const k = key(address);
      // The window starts at the first failure and is not extended by later ones.
      await redis.set(k, '0', 'PX', LOGIN_WINDOW_MS, 'NX');
      const count = await redis.incr(k);
      // The key expired between the two calls: INCR made one without a TTL.
      if (count === 1 && (await redis.pttl(k)) < 0) await redis.pexpire(k, LOGIN_WINDOW_MS);
    },
  };
}
