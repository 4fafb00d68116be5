import { describe, expect, it } from 'vitest';
import { compareIds } from '../../src/customers/search.js';
import { ascendsThroughout, coversStart, describeIds, evaluateListing as evaluate, formatPages } from '../../src/export/pager.js';
import type { PageMeta } from '../../src/export/state.js';

/** Pages holding these CustomerIDs, each read when TotalItemCount was `t`. */
function pages(spec: Array<{ index: number; ids: number[]; t: number }>): Map<number, PageMeta> {
  return new Map(spec.map(({ index, ids, t }, s) => [index, { n: ids.length, t, r: 1, s, ...describeIds(ids.map(String)) }]));
}
const ids = (from: number, count: number): number[] => Array.from({ length: count }, (_, i) => from + i);

/** As the pager does it: duplicates are counted (from the IDs) only when the pages do not ascend throughout. */
function evaluateListing(p: Map<number, PageMeta>, latest: number, start: number, size: number, all: number[][] = []) {
  const flat = all.flat();
  const duplicates = ascendsThroughout(p, Math.ceil(latest / size)) ? 0 : flat.length - new Set(flat).size;
  return evaluate(p, latest, start, size, duplicates);
}

describe('evaluateListing', () => {
  it('accepts pages that add up to a count that held still', () => {
    const p = pages([
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(11, 10), t: 25 },
      { index: 2, ids: ids(21, 5), t: 25 },
    ]);
    expect(evaluateListing(p, 25, 25, 10)).toEqual({ consistent: true });
  });

  it('accepts an empty listing', () => {
    expect(evaluateListing(pages([{ index: 0, ids: [], t: 0 }]), 0, 0, 10)).toEqual({ consistent: true });
  });

  it('re-reads only the short and missing tail when customers were added at the end', () => {
    // Started at 25; 12 were added while paging; page 2 was read before that.
    const p = pages([
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(11, 10), t: 37 },
      { index: 2, ids: ids(21, 5), t: 25 },
      { index: 3, ids: ids(31, 7), t: 37 },
    ]);
    const verdict = evaluateListing(p, 37, 25, 10);
    expect(verdict).toMatchObject({ consistent: false, reread: [2] });
    if (!verdict.consistent) expect(verdict.reason).toContain('grew from 25 to 37');
  });

  it('once the tail is read again, older full pages still count', () => {
    const p = pages([
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(11, 10), t: 25 },
      { index: 2, ids: ids(21, 10), t: 37 },
      { index: 3, ids: ids(31, 7), t: 37 },
    ]);
    expect(evaluateListing(p, 37, 25, 10)).toEqual({ consistent: true, note: expect.stringContaining('grew from 25 to 37') });
  });

  it('reads every page again when a CustomerID came back twice (an insertion in the middle shifted the pages)', () => {
    const spec = [
      { index: 0, ids: ids(1, 10), t: 26 },
      { index: 1, ids: ids(10, 10), t: 26 },
      { index: 2, ids: ids(20, 6), t: 26 },
    ];
    const verdict = evaluateListing(pages(spec), 26, 25, 10, spec.map((x) => x.ids));
    expect(verdict).toMatchObject({ consistent: false, reread: [0, 1, 2] });
    if (!verdict.consistent) expect(verdict.reason).toContain('came back on two pages');
  });

  it('reads every page again when the count fell (a removal shifts every later page)', () => {
    const p = pages([
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(12, 10), t: 24 },
      { index: 2, ids: ids(22, 4), t: 24 },
    ]);
    const verdict = evaluateListing(p, 24, 25, 10);
    expect(verdict).toMatchObject({ consistent: false, reread: [0, 1, 2] });
    if (!verdict.consistent) expect(verdict.reason).toContain('fell from 25');
  });

  it('reads every page again when the count moved and the listing is not in CustomerID order', () => {
    const spec = [
      { index: 0, ids: [5, 3, 9], t: 5 },
      { index: 1, ids: [1, 7, 2], t: 6 },
    ];
    expect(evaluateListing(pages(spec), 6, 5, 3, spec.map((x) => x.ids))).toMatchObject({ consistent: false, reread: [0, 1] });
  });

  it('accepts a listing in any order when the count held still and nothing repeats', () => {
    const spec = [
      { index: 0, ids: [5, 3, 9], t: 5 },
      { index: 1, ids: [1, 7], t: 5 },
    ];
    expect(evaluateListing(pages(spec), 5, 5, 3, spec.map((x) => x.ids))).toEqual({ consistent: true });
    // The same shape with an ID on both pages is not.
    const twice = [spec[0]!, { index: 1, ids: [1, 9], t: 5 }];
    expect(evaluateListing(pages(twice), 5, 5, 3, twice.map((x) => x.ids))).toMatchObject({ consistent: false, reread: [0, 1] });
  });

  it('ignores pages past the final count (the listing shrank back)', () => {
    const p = pages([
      { index: 0, ids: ids(1, 10), t: 10 },
      { index: 1, ids: ids(11, 1), t: 11 },
    ]);
    expect(evaluateListing(p, 10, 10, 10)).toEqual({ consistent: true });
  });
});

describe('coversStart', () => {
  /** As the pager does it: duplicates counted only when the pages do not ascend throughout. */
  function covers(spec: Array<{ index: number; ids: number[]; t: number }>, latest: number, start: number, size = 10): boolean {
    const flat = spec.flatMap((x) => x.ids);
    const p = pages(spec);
    const duplicates = ascendsThroughout(p, Math.ceil(latest / size)) ? 0 : flat.length - new Set(flat).size;
    return coversStart(p, latest, start, size, duplicates);
  }

  it('holds when every position below the start count was read and the listing only grew at its end, whatever the tail', () => {
    // Started at 25, still growing: page 2 was read at the start count, page 3 is short and page 4 never read.
    const spec = [
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(11, 10), t: 31 },
      { index: 2, ids: ids(21, 5), t: 25 },
      { index: 3, ids: ids(31, 3), t: 33 },
    ];
    expect(covers(spec, 48, 25)).toBe(true);
    // The verdict at that count is still not consistent: the rounds go on chasing the tail until they run out.
    expect(evaluateListing(pages(spec), 48, 25, 10)).toMatchObject({ consistent: false });
  });

  it('fails when a position below the start count was not read', () => {
    expect(covers([{ index: 0, ids: ids(1, 10), t: 25 }, { index: 2, ids: ids(21, 5), t: 25 }], 30, 25)).toBe(false);
    // Page 2 read short (4 of the 5 positions of the start).
    expect(covers([{ index: 0, ids: ids(1, 10), t: 25 }, { index: 1, ids: ids(11, 10), t: 25 }, { index: 2, ids: ids(21, 4), t: 25 }], 30, 25)).toBe(false);
  });

  it('fails when a count fell below the start (a removal shifts every later page) or rose past the end', () => {
    const spec = (t1: number) => [
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(12, 10), t: t1 },
      { index: 2, ids: ids(22, 5), t: 30 },
    ];
    expect(covers(spec(30), 30, 25)).toBe(true);
    expect(covers(spec(24), 30, 25)).toBe(false);
    expect(covers(spec(31), 30, 25)).toBe(false);
    expect(covers(spec(30), 24, 25)).toBe(false);
  });

  it('fails when a CustomerID came back on two pages (an insertion before the end) or the IDs do not ascend', () => {
    const doubled = [
      { index: 0, ids: ids(1, 10), t: 25 },
      { index: 1, ids: ids(10, 10), t: 26 },
      { index: 2, ids: ids(20, 6), t: 26 },
    ];
    expect(covers(doubled, 26, 25)).toBe(false);
    const unordered = [
      { index: 0, ids: [5, 3, 9], t: 5 },
      { index: 1, ids: [1, 7, 2], t: 6 },
    ];
    expect(covers(unordered, 6, 5, 3)).toBe(false);
  });
});

describe('describeIds and ascendsThroughout', () => {
  it('keep the first and last ID and whether the page ascends; pages ascend throughout when each follows the one before', () => {
    expect(describeIds(['3', '10', '11'])).toEqual({ first: '3', last: '11', asc: true });
    expect(describeIds(['3', '3'])).toMatchObject({ asc: false });
    expect(describeIds([])).toEqual({ first: null, last: null, asc: true });
    expect(ascendsThroughout(pages([{ index: 0, ids: [1, 2], t: 4 }, { index: 1, ids: [3, 9], t: 4 }]), 2)).toBe(true);
    expect(ascendsThroughout(pages([{ index: 0, ids: [1, 5], t: 4 }, { index: 1, ids: [5, 9], t: 4 }]), 2)).toBe(false);
  });
});

describe('compareIds and formatPages', () => {
  it('compares numeric text as numbers, however long', () => {
    expect(compareIds('9', '10')).toBeLessThan(0);
    expect(compareIds('100002', '100001')).toBeGreaterThan(0);
    expect(compareIds('0042', '42')).toBe(0);
    expect(compareIds('123456789012345678901', '123456789012345678902')).toBeLessThan(0);
  });

  it('writes page lists as ranges', () => {
    expect(formatPages([1, 2, 3, 7, 9, 10])).toBe('1–3, 7, 9–10');
    expect(formatPages([])).toBe('');
  });
});
