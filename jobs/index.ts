import type { JobName } from '../src/outcomes.js';
import { customerCreate } from './customerCreate.js';
import { customerUpdate } from './customerUpdate.js';
import { customerUpsert } from './customerUpsert.js';
import { paymentMethodUpdate } from './paymentMethodUpdate.js';
import { signup } from './signup.js';
import type { RowProcessor } from './types.js';

export type { RowContext, RowOutcome, RowProcessor } from './types.js';

/** One processor per job name of the rows queue. */
export const PROCESSORS: Readonly<Record<JobName, RowProcessor>> = {
  'customer.create': customerCreate,
  'customer.update': customerUpdate,
  'customer.upsert': customerUpsert,
  signup,
  'paymentMethod.update': paymentMethodUpdate,
};
