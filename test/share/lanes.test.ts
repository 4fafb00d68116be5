import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { IDLE_HOLE_HORIZON_MS, KNOWN_RATE_MARGIN, budgetUse, createBudget, exportShareBeside, setExportShare, type ApiBudget, type BudgetClass } from '../../src/redis/budget.js';
import { storeKeys } from '../../src/redis/keys.js';
import { REDIS_URL, deleteKeys } from '../support/pipeline.js';
import { mostInWindow } from '../support/slots.js';

// The budget's two classes, on real Redis: slots reserved by the imports' and the export's takers (no HTTP: the clock alone).
let prefix = '';
const connections: Redis[] = [];
beforeEach(() => {
  prefix = `subsync-test-${randomUUID().slice(0, 8)}`;
});
afterEach(async () => {
  for (const redis of connections.splice(0)) redis.disconnect();
  await deleteKeys(prefix);
});

function budget(kind: BudgetClass, rate: number, exportShare = 0.4): ApiBudget {
  const redis = new Redis(REDIS_URL);
  connections.push(redis);
  return createBudget(redis, storeKeys(prefix), { rate, class: kind, exportShare });
}

/** `takers` loops each taking `count` slots one after another, waiting for each as a worker's slot does before its request. */
async function reserve(b: ApiBudget, takers: number, count: number): Promise<number[]> {
  const slots: number[][] = await Promise.all(
    Array.from({ length: takers }, async () => {
      const mine: number[] = [];
      for (let i = 0; i < count; i++) {
        const { waitMs, at } = await b.reserve();
        mine.push(at);
        if (waitMs > 0) await new Promise((r) => setTimeout(r, waitMs));
      }
      return mine;
    }),
  );
  return slots.flat();
}

describe('the budget shared by the imports and the export', () => {
  it('while both draw, the export has its share of the slots and the imports the rest, never more than the rate together', async () => {
    const rate = 200;
    const imports = budget('import', rate);
    const exporter = budget('export', rate);
    // The imports start first and hold slots ahead; the export joins, then both keep asking.
    const importing = reserve(imports, 8, 50);
    await new Promise((r) => setTimeout(r, 100));
    const exported = await reserve(exporter, 4, 40);
    const imported = await importing;
    // Over the span where both held slots: the export's share of them.
    const { start, end, inBoth, share } = overlap(exported, imported);
    expect(share).toBeGreaterThan(0.33);
    expect(share).toBeLessThan(0.47);
    // One budget: never more than the rate in any second, and at least 0.97 of it used while both wait.
    const all = [...exported, ...imported];
    expect(mostInWindow(all, 1000)).toBeLessThanOrEqual(rate);
    expect((inBoth(all) - 1) / ((end - start) / 1000)).toBeGreaterThanOrEqual(0.97 * rate);
    const use = await budgetUse(connections[0] as Redis, storeKeys(prefix));
    expect(use).toMatchObject({ import: 400, export: 160 });
  });

  it('a class that draws alone has the whole rate', async () => {
    const rate = 50;
    const exporter = budget('export', rate);
    const slots = await reserve(exporter, 4, 25);
    const sorted = slots.sort((a, b) => a - b);
    const gaps = sorted.slice(1).map((at, i) => at - (sorted[i] ?? 0));
    expect(Math.min(...gaps)).toBeCloseTo(1000 / (rate * (1 - KNOWN_RATE_MARGIN)), 1);
    expect(mostInWindow(slots, 1000)).toBeLessThanOrEqual(rate);
  });

  it('an export that starts beside imports holding slots far ahead has its first slot near, then a turn like one more import', async () => {
    const rate = 50;
    const spacing = 1000 / (rate * (1 - KNOWN_RATE_MARGIN));
    const imports = budget('import', rate);
    const exporter = budget('export', rate);
    // The feeder's word: one import runs, so the export takes every other slot (above its floor of 0.4).
    expect(exportShareBeside(0.4, 1)).toBe(0.5);
    expect(exportShareBeside(0.4, 3)).toBe(0.4);
    await setExportShare(connections[0] as Redis, storeKeys(prefix), exportShareBeside(0.4, 1));
    // 100 takers: the imports hold about two seconds of slots ahead, as six workers' rows do.
    const importing = reserve(imports, 100, 2);
    await new Promise((r) => setTimeout(r, 500));
    const first = await exporter.reserve();
    // Not behind everything the imports reserved (about 2 s): among the holes they left.
    expect(first.waitMs).toBeLessThan(IDLE_HOLE_HORIZON_MS + 4 * spacing);
    await new Promise((r) => setTimeout(r, first.waitMs));
    const exported = [first.at, ...(await reserve(exporter, 4, 12))];
    const imported = await importing;
    const { share } = overlap(exported, imported);
    expect(share).toBeGreaterThan(0.42);
    expect(share).toBeLessThan(0.58);
    // Still one clock: never more than the rate in a second, no two slots closer than its spacing.
    const all = [...exported, ...imported].sort((a, b) => a - b);
    expect(mostInWindow(all, 1000)).toBeLessThanOrEqual(rate);
    expect(Math.min(...all.slice(1).map((at, i) => at - (all[i] ?? 0)))).toBeGreaterThan(spacing - 0.01);
  });
});

/** The span where both classes held slots, a count of slots within it, and the export's share of them. */
function overlap(exported: number[], imported: number[]): { start: number; end: number; inBoth: (slots: number[]) => number; share: number } {
  const end = Math.min(Math.max(...exported), Math.max(...imported));
  const start = Math.max(Math.min(...exported), Math.min(...imported));
  const inBoth = (slots: number[]): number => slots.filter((at) => at >= start && at <= end).length;
  return { start, end, inBoth, share: inBoth(exported) / (inBoth(exported) + inBoth(imported)) };
}
