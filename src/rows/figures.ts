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
 * every promise of the process; one object with its methods on the
 * prototype, not a closure per endpoint, since one is made per attempt.
 */
export function countedApi(api: ApiClient, figures: CallFigures): ApiClient {
  return new CountedApi(api, figures);
}

class CountedApi implements ApiClient {
  constructor(
    private readonly api: ApiClient,
    private readonly figures: CallFigures,
  ) {}

  searchCustomers(...args: Parameters<ApiClient['searchCustomers']>): ReturnType<ApiClient['searchCustomers']> {
    return this.count(this.api.searchCustomers(...args), 'searches');
  }
  getCustomer(...args: Parameters<ApiClient['getCustomer']>): ReturnType<ApiClient['getCustomer']> {
    return this.count(this.api.getCustomer(...args), 'reads');
  }
  createCustomer(...args: Parameters<ApiClient['createCustomer']>): ReturnType<ApiClient['createCustomer']> {
    return this.count(this.api.createCustomer(...args));
  }
  updateCustomer(...args: Parameters<ApiClient['updateCustomer']>): ReturnType<ApiClient['updateCustomer']> {
    return this.count(this.api.updateCustomer(...args));
  }
  getOffer(...args: Parameters<ApiClient['getOffer']>): ReturnType<ApiClient['getOffer']> {
    return this.count(this.api.getOffer(...args), 'reads');
  }
  signUp(...args: Parameters<ApiClient['signUp']>): ReturnType<ApiClient['signUp']> {
    return this.count(this.api.signUp(...args));
  }
  updatePaymentMethod(...args: Parameters<ApiClient['updatePaymentMethod']>): ReturnType<ApiClient['updatePaymentMethod']> {
    return this.count(this.api.updatePaymentMethod(...args));
  }
  close(): Promise<void> {
    return this.api.close();
  }

  private async count<R>(call: Promise<R>, kind?: 'searches' | 'reads'): Promise<R> {
    try {
      const result = await call;
      this.counted(kind);
      return result;
    } catch (error) {
      if (error instanceof ApiError) {
        this.counted(kind);
        if (error.code === 'API_RATE_LIMITED') this.figures.rateLimited++;
      }
      throw error;
    }
  }

  private counted(kind: 'searches' | 'reads' | undefined): void {
    this.figures.apiCalls++;
    if (kind) this.figures[kind]++;
  }
}
