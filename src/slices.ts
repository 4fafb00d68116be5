import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Long synchronous work cut into slices of about `sliceMs`, so the event
 * loop runs a whole turn (its due timers, its sockets' data) between them.
 * Called once per unit of work: it answers undefined while the slice lasts,
 * and a promise to await once the slice has run its time; the next slice
 * starts when that promise settles; the pause is {@link wholeTurn}.
 */
export function slicer(sliceMs: number, clock: () => number = () => performance.now()): () => Promise<void> | undefined {
  let began = clock();
  return () => {
    if (clock() - began < sliceMs) return undefined;
    return wholeTurn().then(() => {
      began = clock();
    });
  };
}

/**
 * Settles once the event loop has run a whole turn: the timers that fell due
 * before it, and the sockets' data. Two immediates, because one alone, taken
 * before the loop's check phase, comes back before the timers run.
 */
export async function wholeTurn(): Promise<void> {
  await nextTurn();
  await nextTurn();
}
