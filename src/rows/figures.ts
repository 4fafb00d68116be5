import type { ApiClient } from '../api/client.js';
import { ApiError } from '../api/errors.js';

/** API figures of one row's run, summed into its import's counts when the run ends. */
export interface CallFigures {
  apiCalls: number;
  rateLimited: number;
  /** Of apiCalls: searches (GET /json/customers?contains=…) and reads (GET of one customer or offer). The rest are writes. */
  searches: number;
  reads: number;
}

/** Figures of nothing yet. */
export const noCalls = (): CallFigures => ({ apiCalls: 0, rateLimited: 0, searches: 0, reads: 0 });

/**
 * The API client as one row's run sees it: every call that reached an answer
 * or an API error is counted into `figures` (a 429 also as rate-limited).
 * A wrapper per run, not an AsyncLocalStorage: that would put a hook on
 * every promise of the process.
 */
export function countedApi(api: ApiClient, figures: CallFigures): ApiClient {
  const counted =
    <A extends unknown[], R>(call: (...args: A) => Promise<R>, kind?: 'searches' | 'reads') =>
    async (...args: A): Promise<R> => {
      const count = (): void => {
        figures.apiCalls++;
        if (kind) figures[kind]++;
      };
      try {
        const result = await call(...args);
        count();
        return result;
      } catch (error) {
        if (error instanceof ApiError) {
          count();
          if (error.code === 'API_RATE_LIMITED') figures.rateLimited++;
        }
        throw error;
      }
    };
  return {
    searchCustomers: counted(api.searchCustomers, 'searches'),
    getCustomer: counted(api.getCustomer, 'reads'),
    createCustomer: counted(api.createCustomer),
    updateCustomer: counted(api.updateCustomer),
    getOffer: counted(api.getOffer, 'reads'),
    signUp: counted(api.signUp),
    updatePaymentMethod: counted(api.updatePaymentMethod),
    close: () => api.close(),
  };
}
