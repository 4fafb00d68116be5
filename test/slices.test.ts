import { describe, expect, it } from 'vitest';
import { slicer, wholeTurn } from '../src/slices.js';

/** Holds the event loop `ms`, as a slice of work does. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe('slicer', () => {
  it('lets a slice run its time, then asks for a turn of the event loop, and starts the next slice after it', async () => {
    let now = 0;
    const slice = slicer(3, () => now);
    expect(slice()).toBeUndefined();
    now = 2.9;
    expect(slice()).toBeUndefined();
    now = 3;
    const first = slice();
    expect(first).toBeInstanceOf(Promise);
    now = 10;
    await first;
    // The next slice counts from the end of the turn (10), not from its start.
    now = 12;
    expect(slice()).toBeUndefined();
    now = 13;
    expect(slice()).toBeInstanceOf(Promise);
  });

  it('runs the timers that fell due during a slice before the next, whichever phase of the loop the work is in', async () => {
    const slice = slicer(1);
    for (const from of ['a timer', 'an immediate'] as const) {
      await new Promise<void>((resolve) => (from === 'a timer' ? setTimeout(resolve, 1) : setImmediate(resolve)));
      let ran = false;
      setTimeout(() => (ran = true), 0);
      busy(2);
      const turn = slice();
      expect(turn, from).toBeInstanceOf(Promise);
      await turn;
      expect(ran, from).toBe(true);
    }
  });
});

describe('wholeTurn', () => {
  it('settles after the timers that fell due before it, whichever phase of the loop awaits it', async () => {
    for (const from of ['a timer', 'an immediate'] as const) {
      await new Promise<void>((resolve) => (from === 'a timer' ? setTimeout(resolve, 1) : setImmediate(resolve)));
      let ran = false;
      setTimeout(() => (ran = true), 0);
      busy(2);
      await wholeTurn();
      expect(ran, from).toBe(true);
    }
  });
});
