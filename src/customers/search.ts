import { setTimeout as sleep } from 'node:timers/promises';
import type { ApiClient } from '../api/client.js';
import { decide } from '../api/decision.js';
import type { SearchCustomersResponse, SearchQuery } from '../api/schemas/index.js';
import type { ApiBudget } from '../redis/budget.js';
import type { BackoffBounds } from '../backoff.js';

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
 * One search page, retried on its own by the one retry decision
 * (src/api/decision.ts): a GET changes nothing, so any failure but a
 * refusal (network, timeout, 5xx, an error that is not the API's) is tried
 * again with full-jitter backoff up to `attempts`, and a 429 waits out the
 * fleet's budget without spending one. A refusal is thrown at once.
 */
export async function searchPage(deps: SearchDeps, query: SearchQuery): Promise<SearchCustomersResponse> {
  const attempts = deps.attempts ?? SEARCH_PAGE_ATTEMPTS;
  for (let attempt = 1; ; ) {
    try {
      return await deps.api.searchCustomers(query);
    } catch (error) {
      const decision = decide(error, { attempt, maxAttempts: attempts, backoff: deps.backoff ?? SEARCH_PAGE_BACKOFF });
      if (decision.kind === 'wait-for-budget') {
        await deps.budget.block(decision.retryAfterMs);
        continue;
      }
      if (decision.kind !== 'retry') throw error;
      await sleep(decision.delayMs);
      attempt++;
    }
  }
}

const withoutLeadingZeros = (id: string): string => (id.length > 1 && id.startsWith('0') ? id.replace(/^0+(?=\d)/, '') : id);

/** Numeric-text CustomerIDs compared as numbers, without a length limit. */
export function compareIds(a: string, b: string): number {
  const x = withoutLeadingZeros(a);
  const y = withoutLeadingZeros(b);
  if (x.length !== y.length) return x.length - y.length;
  return x < y ? -1 : x > y ? 1 : 0;
}

const PRINTABLE_ASCII = /^[\x21-\x7E]{1,9999}$/;

/**
 * A CustomerID as text whose byte order is {@link compareIds}'s order (its
 * length, four digits, then the ID without leading zeros), for a sorted set
 * read by ranges of IDs; undefined for an ID that is not printable ASCII,
 * whose bytes might not sort as its characters do.
 */
export function sortableId(id: string): string | undefined {
  if (!PRINTABLE_ASCII.test(id)) return undefined;
  const x = withoutLeadingZeros(id);
  return `${String(x.length).padStart(4, '0')}:${x}`;
}
