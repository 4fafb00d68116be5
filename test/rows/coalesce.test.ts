import { describe, expect, it } from 'vitest';
import type { ApiClient } from '../../src/api/client.js';
import { coalesce, slottedApi, Slots } from '../../src/rows/coalesce.js';

describe('coalesce', () => {
  it('gathers the calls of one turn into one flush per key, answering each call its own result', async () => {
    const flushes: Array<{ key: string; items: number[] }> = [];
    const double = coalesce<number, number>(async (key, items) => {
      flushes.push({ key, items: [...items] });
      return items.map((n) => n * 2);
    });
    const results = await Promise.all([double('a', 1), double('b', 10), double('a', 2), double('a', 3)]);
    expect(results).toEqual([2, 20, 4, 6]);
    expect(flushes).toEqual([
      { key: 'a', items: [1, 2, 3] },
      { key: 'b', items: [10] },
    ]);

    // A later turn is a later flush.
    expect(await double('a', 4)).toBe(8);
    expect(flushes).toHaveLength(3);
  });

  it('with a window, gathers the calls of that many ms, across turns, into one flush', async () => {
    const flushes: number[][] = [];
    const echo = coalesce<number, number>(async (_key, items) => {
      flushes.push([...items]);
      return items;
    }, () => 50);
    const first = echo('a', 1);
    // A later turn, well inside the window.
    await new Promise((resolve) => setImmediate(resolve));
    const second = echo('a', 2);
    expect(await Promise.all([first, second])).toEqual([1, 2]);
    expect(flushes).toEqual([[1, 2]]);
  });

  it('asks the window of the call that starts a gathering', async () => {
    const flushes: number[][] = [];
    const asked: number[] = [];
    // An item's own wait: 0 gathers one turn, more gathers across turns.
    const echo = coalesce<{ n: number; ms: number }, number>(async (_key, items) => {
      flushes.push(items.map((i) => i.n));
      return items.map((i) => i.n);
    }, (item) => {
      asked.push(item.n);
      return item.ms;
    });
    const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

    const first = echo('a', { n: 1, ms: 0 });
    const second = echo('a', { n: 2, ms: 50 });
    await nextTurn();
    const third = echo('a', { n: 3, ms: 50 });
    await nextTurn();
    const fourth = echo('a', { n: 4, ms: 0 });
    expect(await Promise.all([first, second, third, fourth])).toEqual([1, 2, 3, 4]);
    expect(flushes).toEqual([[1, 2], [3, 4]]);
    expect(asked).toEqual([1, 3]);
  });

  it('fails every call of a flush that fails or answers the wrong number of results', async () => {
    const failing = coalesce<number, number>(async () => {
      throw new Error('redis down');
    });
    const settled = await Promise.allSettled([failing('a', 1), failing('a', 2)]);
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected']);

    const short = coalesce<number, number>(async () => [1]);
    await expect(Promise.all([short('a', 1), short('a', 2)])).rejects.toThrow(/answered 1 results for 2 calls/);
  });
});

describe('Slots', () => {
  it('lets at most `size` runs in at once, the rest in the order they came', async () => {
    const slots = new Slots(2);
    let inside = 0;
    let most = 0;
    const order: number[] = [];
    const releases: Array<() => void> = [];
    const runs = [1, 2, 3, 4, 5].map((n) =>
      slots.run(async () => {
        inside++;
        most = Math.max(most, inside);
        order.push(n);
        await new Promise<void>((resolve) => releases.push(resolve));
        inside--;
      }),
    );
    // Let the first two in, then free one slot at a time.
    while (order.length < 5) {
      await new Promise((resolve) => setImmediate(resolve));
      releases.shift()?.();
    }
    releases.forEach((release) => release());
    await Promise.all(runs);
    expect(most).toBe(2);
    expect(order).toEqual([1, 2, 3, 4, 5]);
  });

  it('gives the slot back when a run throws', async () => {
    const slots = new Slots(1);
    await expect(slots.run(async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await slots.run(async () => 'next')).toBe('next');
  });

  it('tells a waiter once when it comes among the next `lookahead` in line, before its slot is free', async () => {
    const slots = new Slots(1, 2);
    const told: number[] = [];
    const started: number[] = [];
    const releases: Array<() => void> = [];
    const runs = [1, 2, 3, 4].map((n) =>
      slots.run(
        async () => {
          started.push(n);
          await new Promise<void>((resolve) => releases.push(resolve));
        },
        () => told.push(n),
      ),
    );
    await new Promise((resolve) => setImmediate(resolve));
    // 1 runs (never waited, never told); 2 and 3 wait within the lookahead; 4 waits behind them.
    expect(started).toEqual([1]);
    expect(told).toEqual([2, 3]);
    releases.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
    expect(started).toEqual([1, 2]);
    expect(told).toEqual([2, 3, 4]);
    while (releases.length > 0 || started.length < 4) {
      releases.shift()?.();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(runs);
    expect(told).toEqual([2, 3, 4]);
  });
});

describe('slottedApi', () => {
  it('holds a slot for each call while it is out, and only then', async () => {
    const started: string[] = [];
    const answers = new Map<string, () => void>();
    const create = async (body: { FirstName: string }) => {
      started.push(body.FirstName);
      await new Promise<void>((resolve) => answers.set(body.FirstName, resolve));
      return { Message: '', CustomerID: body.FirstName };
    };
    // Only the endpoint this test calls; the others are never reached.
    const api = { createCustomer: create } as unknown as ApiClient;
    const slots = new Slots(1);
    const slotted = slottedApi(api, slots);
    const a = slotted.createCustomer({ FirstName: 'a' } as Parameters<ApiClient['createCustomer']>[0]);
    const b = slotted.createCustomer({ FirstName: 'b' } as Parameters<ApiClient['createCustomer']>[0]);
    await expect.poll(() => started).toEqual(['a']);
    answers.get('a')?.();
    expect((await a).CustomerID).toBe('a');
    // The slot went to the next call as soon as the answer was in.
    await expect.poll(() => started).toEqual(['a', 'b']);
    answers.get('b')?.();
    await b;
    // Free again: a take does not wait.
    let taken = false;
    void slots.take().then(() => (taken = true));
    await expect.poll(() => taken).toBe(true);
  });
});
