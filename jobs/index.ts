import type { JobName } from '../src/outcomes.js';
import { customerCreate, readBackCustomer } from './customerCreate.js';
import { customerUpdate } from './customerUpdate.js';
import { customerUpsert, readBackUpsert } from './customerUpsert.js';
import { paymentMethodUpdate } from './paymentMethodUpdate.js';
import { readBackSignup, signup } from './signup.js';
import type { ReadBack, RowProcessor } from './types.js';

export type { ReadBack, RowContext, RowOutcome, RowProcessor } from './types.js';

/** One processor per job name of the rows queue. */
export const PROCESSORS: Readonly<Record<JobName, RowProcessor>> = {
  'customer.create': customerCreate,
  'customer.update': customerUpdate,
  'customer.upsert': customerUpsert,
  signup,
  'paymentMethod.update': paymentMethodUpdate,
};

/** How each non-idempotent job reads its create back (the PUTs need none). */
export const READ_BACKS: Readonly<Partial<Record<JobName, ReadBack>>> = {
  'customer.create': readBackCustomer,
  'customer.upsert': readBackUpsert,
  signup: readBackSignup,
};
