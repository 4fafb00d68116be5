import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ADAPTIVE_RATE, KNOWN_RATE_MARGIN, LATE_MAX_MS, LATE_RETRIES, LATE_SLOT_MS, START_IDLE_MS, UNPACED_LEASE_MS, budgetLateKey, budgetStartKey, budgetUse, createBudget, type AdaptiveRatePolicy, type ApiBudget } from '../../src/redis/budget.js';
import { storeKeys } from '../../src/redis/keys.js';
import { REDIS_URL, deleteKeys, until } from '../support/pipeline.js';
import { mostInWindow } from '../support/slots.js';

// Each test: its own key prefix, and one Redis connection per budget, as separate processes would have.
let prefix = '';
const connections: Redis[] = [];
beforeEach(() => {
  prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
});
afterEach(async () => {
  for (const redis of connections.splice(0)) redis.disconnect();
  await deleteKeys(prefix);
});

/** The policy without the gentle start: unpaced from the first request, as the tests of the lease and the cut need. */
const AT_ONCE: AdaptiveRatePolicy = { ...ADAPTIVE_RATE, startRate: 0 };

function budgets(count: number, options: { rate?: number; adaptive?: AdaptiveRatePolicy } = {}): ApiBudget[] {
  return Array.from({ length: count }, () => {
    const redis = new Redis(REDIS_URL);
    connections.push(redis);
    return createBudget(redis, storeKeys(prefix), { rate: options.rate, adaptive: options.adaptive ?? AT_ONCE });
  });
}

/** Reserves `count` slots on `budget` and reports each one as admitted (a 200). */
async function sendAdmitted(budget: ApiBudget, count: number): Promise<number[]> {
  const slots: number[] = [];
  for (let i = 0; i < count; i++) {
    slots.push((await budget.reserve()).at);
    budget.observe({ status: 200 });
  }
  return slots;
}

describe('the fleet-wide API budget', () => {
  it('a known rate: three processes together never reserve more than it in any second, paced just under it', async () => {
    const rate = 40;
    const fleet = budgets(3, { rate });
    const slots = (await Promise.all(fleet.map((budget) => sendAdmitted(budget, 40)))).flat();
    expect(slots).toHaveLength(120);
    expect(mostInWindow(slots, 1000)).toBeLessThanOrEqual(rate);
    // Evenly spaced at the paced rate: the closest two slots are a whole interval apart.
    const sorted = slots.sort((a, b) => a - b);
    const gaps = sorted.slice(1).map((at, i) => at - (sorted[i] ?? 0));
    expect(Math.min(...gaps)).toBeCloseTo(1000 / (rate * (1 - KNOWN_RATE_MARGIN)), 1);
  });

  it('a request that wakes well after its slot (a stalled process) takes a fresh slot instead of going late', async () => {
    const redis = new Redis(REDIS_URL);
    connections.push(redis);
    const budget = createBudget(redis, storeKeys(prefix), { rate: 20, class: 'import' });
    // Three slots taken: the next is about 150 ms ahead.
    await sendAdmitted(budget, 3);
    const acquiring = budget.acquire();
    await new Promise((r) => setTimeout(r, 30));
    // The event loop stalls past the slot: its timer fires long after it.
    const stalled = Date.now();
    while (Date.now() - stalled < 200 + 4 * LATE_SLOT_MS) {
      // busy: what a long GC or a loaded machine does to this process
    }
    await acquiring;
    // The late slot went unused and a fresh one was drawn: five drawn, four sent. On a loaded machine the
    // fresh slot's timer may fire late too, and the request then takes another (LATE_RETRIES at most); going
    // on the stalled slot would have drawn four.
    const drawn = (await budgetUse(redis, storeKeys(prefix))).import;
    expect(drawn).toBeGreaterThanOrEqual(5);
    expect(drawn).toBeLessThanOrEqual(4 + LATE_RETRIES);
  });

  it('a late request whose leave to go reaches it too late (it stalled again while asking) takes a fresh slot', async () => {
    const redis = new Redis(REDIS_URL);
    connections.push(redis);
    const keys = storeKeys(prefix);
    // The process stalls twice, as a loaded machine stalls it: just after its slot's answer (so it wakes a
    // little late and asks leave to go), then again as that leave comes back (so it would leave well after it).
    const stalls = new Map([
      // Just past LATE_SLOT_MS: its leave is then asked well within LATE_MAX_MS, even on a loaded machine.
      [keys.budgetTat, LATE_SLOT_MS + 1],
      [budgetLateKey(keys), 2 * LATE_MAX_MS],
    ]);
    const stalling = new Proxy(redis, {
      get(target, name) {
        if (name !== 'evalsha') {
          const value: unknown = Reflect.get(target, name, target);
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return async (sha: string, keyCount: number, args: string[]) => {
          const reply = await target.evalsha(sha, keyCount, args);
          const stall = stalls.get(args[0] ?? '');
          if (stall !== undefined) {
            stalls.delete(args[0] ?? '');
            const from = Date.now();
            while (Date.now() - from < stall) {
              // busy: the event loop stalled
            }
          }
          return reply;
        };
      },
    });
    // At 200/s the margin lets a few late requests go (at 20/s, none).
    const budget = createBudget(stalling, keys, { rate: 200, class: 'import' });
    // Connected first, so the lateness is the stall's, not the connection's.
    await redis.ping();
    await budget.acquire();
    // Both stalls happened: the leave was asked for and given (its entry is there), then not used.
    expect(stalls.size).toBe(0);
    expect(await redis.zcard(budgetLateKey(keys))).toBeGreaterThanOrEqual(1);
    // A fresh slot was drawn after the late one: two drawn for the one request (more only if a loaded
    // machine made the fresh one late too).
    expect((await budgetUse(redis, keys)).import).toBeGreaterThanOrEqual(2);
  });

  it('no learned rate until a 429: requests are not paced', async () => {
    const [budget] = budgets(1);
    const reserved = await Promise.all(Array.from({ length: 50 }, () => budget!.reserve()));
    expect(reserved.every((r) => r.waitMs === 0)).toBe(true);
    expect(await budget!.learnedRate()).toBeUndefined();
  });

  it('with no rate known or learned, the fleet starts at startRate and doubles it until unpaced past the ceiling', async () => {
    const [first, second] = budgets(2, { adaptive: { ...ADAPTIVE_RATE, startRate: 100, startDoublingMs: 200, startCeiling: 400 } });
    const slots = [await first!.reserve(), await second!.reserve(), await first!.reserve(), await second!.reserve()];
    // Both processes draw from one pace of about 100/s: slots about 10 ms apart (a little less as it doubles;
    // 6 would take 150 ms of asking).
    for (let i = 1; i < slots.length; i++) {
      const gap = slots[i]!.at - slots[i - 1]!.at;
      expect(gap).toBeGreaterThan(6);
      expect(gap).toBeLessThanOrEqual(10.01);
    }
    const ttl = await connections[0]!.pttl(budgetStartKey(storeKeys(prefix)));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(START_IDLE_MS);
    // Two doublings later the pace is past the ceiling: unpaced, under a lease.
    await new Promise((resolve) => setTimeout(resolve, 450));
    const later = await Promise.all(Array.from({ length: 20 }, () => first!.reserve()));
    expect(later.every((r) => r.waitMs === 0)).toBe(true);
    expect(await first!.learnedRate()).toBeUndefined();
  });

  it('a 429 while the fleet starts: the slots reserved before it are asked for again, and go after the block', async () => {
    const [budget] = budgets(1, { adaptive: { ...ADAPTIVE_RATE, startRate: 10, startDoublingMs: 10_000 } });
    const began = Date.now();
    // Five requests reserve slots 100 ms apart; the first goes at once.
    const went = Array.from({ length: 5 }, () => budget!.acquire().then(() => Date.now() - began));
    expect(await went[0]).toBeLessThan(90);
    // The service's window is full: a 429 with a Retry-After of a second blocks the fleet.
    await budget!.block(1000);
    const rest = await Promise.all(went.slice(1));
    // Without asking again they would have gone at about 100, 200, 300 and 400 ms, into the full window.
    for (const ms of rest) expect(ms).toBeGreaterThanOrEqual(990);
  });

  it('unpaced, a lease lets a process send without asking Redis each time, and its 429 reports what it sent', async () => {
    const [budget] = budgets(1);
    const learned = storeKeys(prefix).budgetRate;
    await sendAdmitted(budget!, 20);
    // One acquire reached Redis; the other 19 went under the lease it gave.
    expect(Number(await connections[0]!.hget(learned, 's'))).toBe(1);
    await budget!.block(1000);
    expect(Number(await connections[0]!.hget(learned, 's'))).toBe(20);
    // The cut's base is all 20 the service admitted.
    expect(await budget!.learnedRate()).toBeCloseTo(ADAPTIVE_RATE.decrease * 20, 5);
  });

  it('unpaced, the requests that find the lease ended wait for one acquire between them, and every one is counted', async () => {
    const redis = new Redis(REDIS_URL);
    connections.push(redis);
    let acquires = 0;
    // The connection as the budget sees it, counting its script calls.
    const counting = new Proxy(redis, {
      get(target, key, receiver) {
        if (key !== 'evalsha') return Reflect.get(target, key, receiver) as unknown;
        return (...args: unknown[]) => {
          acquires++;
          return (target.evalsha as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        };
      },
    });
    const budget = createBudget(counting, storeKeys(prefix), { rate: undefined, adaptive: AT_ONCE });
    await budget.reserve();
    expect(acquires).toBe(1);
    // The lease runs out (it lives UNPACED_LEASE_MS on this process's clock).
    await new Promise((resolve) => setTimeout(resolve, UNPACED_LEASE_MS + 20));
    const answers = await Promise.all(Array.from({ length: 32 }, () => budget.reserve()));
    expect(answers.every((a) => a.waitMs === 0)).toBe(true);
    expect(acquires).toBe(2);
    await budget.block(1000);
    expect(Number(await redis.hget(storeKeys(prefix).budgetRate, 's'))).toBe(33);
  });

  it('a 429 cuts the rate to decrease × what the service admitted, once for a burst, and every process paces at it', async () => {
    const [first, second] = budgets(2);
    await sendAdmitted(first!, 30);
    await first!.block(1000);
    const learned = await first!.learnedRate();
    // The 30 admitted answers were reported (most of them with the 429: they went under a lease).
    expect(learned).toBeGreaterThan(0);
    expect(learned).toBeLessThanOrEqual(ADAPTIVE_RATE.decrease * 30);
    expect(await second!.learnedRate()).toBe(learned);

    // More 429s from the same burst (requests already in flight) cut nothing more.
    await second!.block(1000);
    await first!.block(1000);
    expect(await second!.learnedRate()).toBe(learned);

    // The fleet was not paced: its burst may fill the service's window, so everyone waits out the Retry-After first.
    const waits: Array<{ waitMs: number; at: number }> = [];
    for (let i = 0; i < 5; i++) waits.push(await second!.reserve());
    expect(waits[0]!.waitMs).toBeGreaterThan(900);
    const gaps = waits.slice(1).map((w, i) => w.at - waits[i]!.at);
    for (const gap of gaps) expect(gap).toBeCloseTo(1000 / learned!, 0);
  });

  it('a cut made unpaced takes in the answers other processes report late, until its block ends', async () => {
    const [first, second, third] = budgets(3);
    // Unpaced, all three send under their leases; each has answers the others know nothing of.
    await Promise.all([first, second, third].map((budget) => budget!.reserve()));
    for (let i = 0; i < 60; i++) first!.observe({ status: 201 });
    for (let i = 0; i < 70; i++) second!.observe({ status: 201 });
    for (let i = 0; i < 70; i++) third!.observe({ status: 201 });
    await first!.block(600);
    const cut = (await first!.learnedRate())!;
    expect(cut).toBeLessThanOrEqual(ADAPTIVE_RATE.decrease * 61);

    // During the block: the second reports with its own 429 (an echo, which cuts nothing more), the third with its next request.
    await second!.block(600);
    expect(await first!.learnedRate()).toBeCloseTo(ADAPTIVE_RATE.decrease * (cut / ADAPTIVE_RATE.decrease + 70), 3);
    await new Promise((r) => setTimeout(r, UNPACED_LEASE_MS + 10));
    await third!.reserve();
    const raised = (await first!.learnedRate())!;
    expect(raised).toBeCloseTo(ADAPTIVE_RATE.decrease * (cut / ADAPTIVE_RATE.decrease + 140), 3);

    // Once the block has ended, what is reported is sent at the cut's pace, and raises nothing.
    await new Promise((r) => setTimeout(r, 650));
    for (let i = 0; i < 100; i++) second!.observe({ status: 201 });
    await second!.reserve();
    expect(await first!.learnedRate()).toBeLessThan(raised + 5);
  });

  it('grows additively while requests wait for the rate, and a later 429 cuts it again', async () => {
    const policy: AdaptiveRatePolicy = { ...ADAPTIVE_RATE, decrease: 0.5, increase: 1, cutSpacingMs: 0 };
    const [first, second] = budgets(2, { adaptive: policy });
    await sendAdmitted(first!, 10);
    await first!.block(1000);
    const cut = (await first!.learnedRate())!;
    expect(cut).toBeGreaterThan(0);

    // Two processes keep requests waiting for the rate; it grows.
    let stop = false;
    const senders = [first!, second!].map(async (budget) => {
      while (!stop) {
        await budget.acquire();
        budget.observe({ status: 201 });
      }
    });
    const grown = await until(async () => {
      const rate = (await second!.learnedRate())!;
      return rate > cut * 1.5 ? rate : undefined;
    }, 'the learned rate to grow', 20_000);
    stop = true;
    await Promise.all(senders);

    // The next 429 (once the reservations made at the old rate have gone) cuts it again.
    const after = await until(async () => {
      await second!.block(1000);
      const rate = (await first!.learnedRate())!;
      return rate < grown ? rate : undefined;
    }, 'a second cut', 20_000);
    expect(after).toBeLessThanOrEqual(grown * policy.decrease);
    expect(after).toBeGreaterThanOrEqual(policy.floor);
  });

  it('a known rate caps the learned one, and a 429 lowers the pace under it', async () => {
    const rate = 50;
    const [budget] = budgets(1, { rate });
    await sendAdmitted(budget!, 5);
    await budget!.block(1000);
    const learned = (await budget!.learnedRate())!;
    expect(learned).toBeLessThanOrEqual(rate * ADAPTIVE_RATE.decrease);
    // Paced, a one-second Retry-After does not stop the fleet: the cut does the slowing down.
    const [a, b] = [await budget!.reserve(), await budget!.reserve()];
    expect(a.waitMs).toBeLessThan(1000);
    expect(b.at - a.at).toBeCloseTo(1000 / learned, 0);
  });

  it('a Retry-After longer than a second (a quota) stops everyone for its length, paced or not', async () => {
    const [first, second] = budgets(2, { rate: 100 });
    await first!.reserve();
    await first!.block(5000);
    expect((await second!.reserve()).waitMs).toBeGreaterThan(4000);
  });

  it('forgets the learned rate after forgetMs without a 429', async () => {
    const [budget] = budgets(1, { adaptive: { ...ADAPTIVE_RATE, forgetMs: 300 } });
    await sendAdmitted(budget!, 5);
    await budget!.block(100);
    expect(await budget!.learnedRate()).toBeDefined();
    await until(async () => ((await budget!.learnedRate()) === undefined ? true : undefined), 'the learned rate to be forgotten', 10_000);
    expect((await budget!.reserve()).waitMs).toBe(0);
  });
});
