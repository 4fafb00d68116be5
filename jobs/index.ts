import type { JobName } from '../src/outcomes.js';
import { customerCreate, readBackCustomer } from './customerCreate.js';
import { customerUpdate } from './customerUpdate.js';
import { customerUpsert, readBackUpsert } from './customerUpsert.js';
import { paymentMethodUpdate } from './paymentMethodUpdate.js';
import { readBackSignup, signup } from './signup.js';
import type { ReadBack, RowProcessor } from './types.js';

export type { ReadBack, RowContext, RowOutcome, RowProcessor } from './types.js';

/** What the row protocol (src/rows/) needs to know of one job name. */
export interface RowJob {
  process: RowProcessor;
  /** How a possibly-applied create is read back; the PUTs are idempotent and need none. */
  readBack?: ReadBack;
  /**
   * Without the duplicate guard, the processor's first step on a pending row
   * is to mark it `sent`, before any request; the protocol claims a row
   * whose job does not (an update) before it starts instead.
   */
  marksSentFirst: boolean;
}

/** One entry per job name of the rows queue. */
export const ROW_JOBS: Readonly<Record<JobName, RowJob>> = {
  'customer.create': { process: customerCreate, readBack: readBackCustomer, marksSentFirst: true },
  'customer.update': { process: customerUpdate, marksSentFirst: false },
  // Searches for its match before it may create.
  'customer.upsert': { process: customerUpsert, readBack: readBackUpsert, marksSentFirst: false },
  signup: { process: signup, readBack: readBackSignup, marksSentFirst: true },
  'paymentMethod.update': { process: paymentMethodUpdate, marksSentFirst: false },
};

/** Whether a row's job can read a possibly-applied request back (a card row that lost its cells is then read back, not failed). */
export const canReadBack = (name: JobName): boolean => ROW_JOBS[name].readBack !== undefined;
