import { setTimeout as sleep } from 'node:timers/promises';
import type { ApiClient } from '../api/client.js';
import { ApiError, ApiRateLimitedError } from '../api/errors.js';
import type { SearchCustomersResponse, SearchQuery } from '../api/schemas/index.js';
import type { ApiBudget } from '../redis/budget.js';
import { fullJitterBackoff, type BackoffBounds } from '../backoff.js';

/** Attempts of one search page (an idempotent GET) before its reader gives up; 429s wait and do not count. */
export const SEARCH_PAGE_ATTEMPTS = 6;
/** Backoff between them: short, since a page read holds its caller. */
export const SEARCH_PAGE_BACKOFF: BackoffBounds = { baseMs: 200, capMs: 5_000 };

export interface SearchDeps {
  api: Pick<ApiClient, 'searchCustomers'>;
  /** A 429 blocks the fleet's budget for its Retry-After. */
  budget: Pick<ApiBudget, 'block'>;
  attempts?: number;
  backoff?: BackoffBounds;
}

/**
 * One search page, retried on its own: a GET changes nothing, so a
 * transient failure (network, timeout, 5xx) is tried again with full-jitter
 * backoff up to `attempts`, and a 429 waits out the fleet's budget without
 * spending one. A refusal is thrown at once.
 */
export async function searchPage(deps: SearchDeps, query: SearchQuery): Promise<SearchCustomersResponse> {
  const attempts = deps.attempts ?? SEARCH_PAGE_ATTEMPTS;
  for (let attempt = 1; ; ) {
    try {
      return await deps.api.searchCustomers(query);
    } catch (error) {
      if (error instanceof ApiRateLimitedError) {
        await deps.budget.block(error.retryAfterMs);
        continue;
      }
      if (!(error instanceof ApiError) || !error.transient || attempt >= attempts) throw error;
      await sleep(fullJitterBackoff(attempt, error.retryAfterMs, deps.backoff ?? SEARCH_PAGE_BACKOFF));
      attempt++;
    }
  }
}

/** Numeric-text CustomerIDs compared as numbers, without a length limit. */
export function compareIds(a: string, b: string): number {
  const x = a.length > 1 && a.startsWith('0') ? a.replace(/^0+(?=\d)/, '') : a;
  const y = b.length > 1 && b.startsWith('0') ? b.replace(/^0+(?=\d)/, '') : b;
  if (x.length !== y.length) return x.length - y.length;
  return x < y ? -1 : x > y ? 1 : 0;
}
