import { z } from 'zod';

const probability = z.number().min(0).max(1);

/** A partial change of faults, as `setFaults` and `PUT /_sandbox/faults` take it. */
export const SandboxFaultsPatchSchema = z
  .strictObject({
    latencyMs: z.number().int().min(0),
    errorRate: probability,
    errorAfterApplyRate: probability,
    rateLimit: z.number().min(0),
    dropAfterCommitRate: probability,
    echoCardData: probability,
    echoCardDataStatus: z.number().int().min(400).max(599),
  })
  .partial();

/** The sandbox's switchable faults. All off by default. */
export interface SandboxFaults {
  /** Added before every /json request is handled. */
  latencyMs: number;
  /** Probability of a 503 before anything is applied. */
  errorRate: number;
  /** Probability of a 500 after a POST/PUT was applied. */
  errorAfterApplyRate: number;
  /** Requests per second over a sliding second; beyond it, 429 with Retry-After. 0 = none. */
  rateLimit: number;
  /** Probability that an applied POST/PUT gets no answer: the socket is destroyed. */
  dropAfterCommitRate: number;
  /**
   * Probability that a request carrying card data (a sign-up, a payment-method
   * update) is refused, unapplied, with a Message quoting its card number as
   * sent and dotted, and its CVC: a service whose words must never be kept
   * as they are.
   */
  echoCardData: number;
  /** The status of those refusals: 400 (declined, for good) by default; a 5xx is retried. */
  echoCardDataStatus: number;
}

export const NO_FAULTS: SandboxFaults = {
  latencyMs: 0,
  errorRate: 0,
  errorAfterApplyRate: 0,
  rateLimit: 0,
  dropAfterCommitRate: 0,
  echoCardData: 0,
  echoCardDataStatus: 400,
};

/** What the sandbox has answered and injected, for tests and benchmarks. */
export interface SandboxStats {
  /** Every /json request received. */
  requests: number;
  /** Requests by endpoint name. */
  byEndpoint: Record<string, number>;
  /** Answers by HTTP status ("dropped" for commit-then-drop). */
  byStatus: Record<string, number>;
  /** Faults injected, by kind. */
  faults: { error5xx: number; error5xxAfterApply: number; rateLimited: number; droppedAfterCommit: number; echoedCardData: number };
  /** POST/PUT requests whose change was applied (whatever the client then heard). */
  applied: number;
  /** Epoch ms of the first and last /json request, to compute achieved rates. */
  firstRequestAt: number | undefined;
  lastRequestAt: number | undefined;
  /** /json requests received in each whole second since the first (429s included), for a day at most: a rate's start apart from its pace. */
  perSecond: number[];
  /**
   * The most /json requests received in any 1000 ms (429s included): what a
   * limiter of a sliding second compares with its limit, so how near a
   * client's pace came to a 429.
   */
  fullestSecond: number;
}

/** Seconds `perSecond` counts, at most (a day). */
export const PER_SECOND_SPAN = 86_400;

/** Counts one request received at `now` (epoch ms) into the stats; `lastSecond` (kept beside them) finds the fullest second. */
export function countRequest(stats: SandboxStats, now: number, lastSecond?: SlidingSecond): void {
  if (lastSecond) {
    lastSecond.add(now);
    stats.fullestSecond = Math.max(stats.fullestSecond, lastSecond.countAt(now));
  }
  stats.requests++;
  stats.firstRequestAt ??= now;
  stats.lastRequestAt = now;
  const second = Math.floor((now - stats.firstRequestAt) / 1000);
  // A clock set back puts a request before the first: it counts in the total only.
  if (second < 0 || second >= PER_SECOND_SPAN) return;
  while (stats.perSecond.length <= second) stats.perSecond.push(0);
  stats.perSecond[second] = (stats.perSecond[second] ?? 0) + 1;
}

export function emptyStats(): SandboxStats {
  return {
    requests: 0,
    byEndpoint: {},
    byStatus: {},
    faults: { error5xx: 0, error5xxAfterApply: 0, rateLimited: 0, droppedAfterCommit: 0, echoedCardData: 0 },
    applied: 0,
    firstRequestAt: undefined,
    lastRequestAt: undefined,
    perSecond: [],
    fullestSecond: 0,
  };
}

/** Times (epoch ms, added in order) within the last 1000 ms. */
export class SlidingSecond {
  private readonly times: number[] = [];
  private head = 0;

  add(now: number): void {
    this.times.push(now);
  }

  /** How many lie in (now − 1000, now]; the older ones are dropped. */
  countAt(now: number): number {
    while (this.head < this.times.length && (this.times[this.head] ?? 0) <= now - 1000) this.head++;
    if (this.head > 4096) {
      this.times.splice(0, this.head);
      this.head = 0;
    }
    return this.times.length - this.head;
  }

  /** The oldest time held since the last `countAt`. */
  oldest(): number | undefined {
    return this.times[this.head];
  }
}

/**
 * A sliding one-second window: at most `limit` requests are let through in
 * any 1000 ms. A refused request learns, in whole seconds as Retry-After
 * allows, when the oldest admitted request leaves the window.
 */
export class SlidingWindowLimiter {
  private readonly admitted = new SlidingSecond();

  /** Returns 0 when admitted, else the seconds to wait (at least 1). */
  tryAdmit(limit: number, now: number): number {
    if (this.admitted.countAt(now) < limit) {
      this.admitted.add(now);
      return 0;
    }
    const oldest = this.admitted.oldest() ?? now;
    return Math.max(1, Math.ceil((oldest + 1000 - now) / 1000));
  }
}

const EchoedCardSchema = z.object({ AccountNumber: z.string(), CVCode: z.string().optional() });

/**
 * The Message of an echoCardData refusal of `body`, or undefined when the
 * body carries no card: "Card <number> (<number with dots>) cvc <CVC> was
 * declined", the words a careless service or payment processor uses.
 */
export function cardEchoMessage(body: unknown, status: number): string | undefined {
  const holder = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const card = EchoedCardSchema.safeParse(holder.CreditCardInfo ?? holder.CreditCard);
  if (!card.success) return undefined;
  const number = card.data.AccountNumber;
  const dotted = number.match(/.{1,4}/g)?.join('.') ?? number;
  const cvc = card.data.CVCode === undefined || card.data.CVCode === '' ? 'none' : card.data.CVCode;
  return status >= 500
    ? `Payment processor error charging card ${number} (${dotted}) cvc ${cvc}, expiry unknown`
    : `Card ${number} (${dotted}) cvc ${cvc} was declined`;
}
