import type { ApiClient } from '../api/client.js';
import { ApiError } from '../api/errors.js';

/** API figures of one row's run, summed into its import's counts when the run ends. */
export interface CallFigures {
  apiCalls: number;
  rateLimited: number;
}

/**
 * The API client as one row's run sees it: every call that reached an answer
 * or an API error is counted into `figures` (a 429 also as rate-limited).
 * A wrapper per run, not an AsyncLocalStorage: that would put a hook on
 * every promise of the process.
 */
export function countedApi(api: ApiClient, figures: CallFigures): ApiClient {
  const counted =
    <A extends unknown[], R>(call: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      try {
        const result = await call(...args);
        figures.apiCalls++;
        return result;
      } catch (error) {
        if (error instanceof ApiError) {
          figures.apiCalls++;
          if (error.status === 429) figures.rateLimited++;
        }
        throw error;
      }
    };
  return {
    searchCustomers: counted(api.searchCustomers),
    getCustomer: counted(api.getCustomer),
    createCustomer: counted(api.createCustomer),
    updateCustomer: counted(api.updateCustomer),
    getOffer: counted(api.getOffer),
    signUp: counted(api.signUp),
    updatePaymentMethod: counted(api.updatePaymentMethod),
    close: () => api.close(),
  };
}
