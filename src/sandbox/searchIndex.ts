/**
 * The index behind the sandbox's customer search: a scan of every customer per
 * request answers in hundreds of milliseconds at a million customers, and the
 * search planner asks for counts all the time.
 *
 * Customers are known here by their position in CustomerID order. The
 * vocabulary holds every distinct lower-cased FirstName and LastName with the
 * ascending positions of the customers carrying it. A search looks for the
 * text in the vocabulary (tens of thousands of names joined into one string:
 * one indexOf pass, not a million customers) and merges the position lists of
 * the names containing it into one ascending, de-duplicated list: exactly the
 * customers whose FirstName or LastName contains the text, in CustomerID
 * order. Merged lists are cached per text and kept right as customers are
 * added (an append) or renamed (dropped when the rename changes the answer).
 */

/** Merged lists kept at most: each added customer is checked against every one. */
const MAX_CACHED_QUERIES = 256;
/** Positions kept in all merged lists together at most (8 bytes each). */
const MAX_CACHED_POSITIONS = 4_000_000;

/** A distinct lower-cased name and who carries it, ascending. */
interface Term {
  readonly text: string;
  readonly positions: number[];
}

/** Between the names in the vocabulary text; a needle containing it is searched name by name. */
const SEPARATOR = '\n';

export class CustomerSearchIndex {
  /** By term id, in order of first appearance. A name nobody carries any more keeps its (empty) term. */
  private readonly terms: Term[] = [];
  private readonly termIds = new Map<string, number>();
  /**
   * Term ids by the name as written: seeding a million customers from a few
   * thousand names then lower-cases each name once, not a million times.
   */
  private readonly termIdsByName = new Map<string, number>();
  /** Every term's text, joined by SEPARATOR: one indexOf pass finds all names containing a needle. */
  private vocabulary = '';
  /** Where each term starts in `vocabulary`, by term id. */
  private readonly starts: number[] = [];
  /** Terms not yet joined into `vocabulary`: joining waits for the next search. */
  private unjoined: string[] = [];
  /** Each customer's first-name and last-name term ids, by position. */
  private readonly firstNames: number[] = [];
  private readonly lastNames: number[] = [];
  /** Merged lists by lower-cased text, least recently used first. */
  private readonly cache = new Map<string, number[]>();
  private cachedPositions = 0;

  /** Customers indexed: positions run from 0 to size - 1. */
  get size(): number {
    return this.firstNames.length;
  }

  /** Indexes the next customer (position = size): created, signed up or seeded. */
  add(firstName: string, lastName: string): void {
    const position = this.firstNames.length;
    const first = this.termIdOf(firstName);
    const last = this.termIdOf(lastName);
    this.firstNames.push(first);
    this.lastNames.push(last);
    this.post(first, last, position, appendPosition);
    if (this.cache.size === 0) return;
    // The newcomer has the highest position, so it goes at the end of every list it belongs to.
    const names = this.namesOf(position);
    for (const [text, positions] of this.cache) {
      if (matches(names, text)) {
        positions.push(position);
        this.cachedPositions++;
      }
    }
  }

  /** Re-indexes a customer whose names an update may have changed. */
  rename(position: number, firstName: string, lastName: string): void {
    if (position < 0 || position >= this.size) throw new RangeError(`No customer at position ${position}`);
    const before = this.namesOf(position);
    const first = this.termIdOf(firstName);
    const last = this.termIdOf(lastName);
    if (first === this.firstNames[position] && last === this.lastNames[position]) return;
    this.unpost(position);
    this.firstNames[position] = first;
    this.lastNames[position] = last;
    this.post(first, last, position, insertPosition);
    const after = this.namesOf(position);
    for (const [text, positions] of this.cache) {
      if (matches(before, text) !== matches(after, text)) this.forget(text, positions);
    }
  }

  /**
   * Positions of the customers whose first or last name contains `needle`
   * (already lower-cased, not empty), ascending. The answer is the cache's own
   * list: the caller reads it and must not keep it past the next change.
   */
  matching(needle: string): readonly number[] {
    const cached = this.cache.get(needle);
    if (cached) {
      this.cache.delete(needle);
      this.cache.set(needle, cached);
      return cached;
    }
    const lists = this.termsContaining(needle).map((term) => term.positions);
    const merged = union(lists, this.size);
    this.remember(needle, merged);
    return merged;
  }

  /** The terms whose text contains `needle`, each once. */
  private termsContaining(needle: string): Term[] {
    if (needle.includes(SEPARATOR)) return this.terms.filter((term) => term.text.includes(needle));
    const vocabulary = this.joinedVocabulary();
    const found: Term[] = [];
    let at = vocabulary.indexOf(needle);
    while (at !== -1) {
      const id = this.termIdAt(at);
      const term = this.terms[id];
      if (term && term.positions.length > 0) found.push(term);
      // Go on from the next term: a name containing the needle twice counts once.
      const next = this.starts[id + 1];
      if (next === undefined) break;
      at = vocabulary.indexOf(needle, next);
    }
    return found;
  }

  private joinedVocabulary(): string {
    if (this.unjoined.length > 0) {
      const tail = this.unjoined.join(SEPARATOR) + SEPARATOR;
      // One flat string (a join), not a chain of concatenations to flatten on every search.
      this.vocabulary = [this.vocabulary, tail].join('');
      this.unjoined = [];
    }
    return this.vocabulary;
  }

  /** The id of the term whose text covers offset `at` of the vocabulary text. */
  private termIdAt(at: number): number {
    let lo = 0;
    let hi = this.starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if ((this.starts[mid] ?? 0) <= at) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  private termIdOf(name: string): number {
    const known = this.termIdsByName.get(name);
    if (known !== undefined) return known;
    const text = name.toLowerCase();
    let id = this.termIds.get(text);
    if (id === undefined) {
      id = this.terms.length;
      this.terms.push({ text, positions: [] });
      this.termIds.set(text, id);
      const previous = this.terms[id - 1];
      this.starts.push(previous ? (this.starts[id - 1] ?? 0) + previous.text.length + SEPARATOR.length : 0);
      this.unjoined.push(text);
    }
    this.termIdsByName.set(name, id);
    return id;
  }

  private namesOf(position: number): Names {
    return { first: this.textOf(this.firstNames[position]), last: this.textOf(this.lastNames[position]) };
  }

  private textOf(id: number | undefined): string {
    return (id === undefined ? undefined : this.terms[id])?.text ?? '';
  }

  private post(first: number, last: number, position: number, place: (list: number[], position: number) => void): void {
    this.placeIn(first, position, place);
    // A customer named Lee Lee is listed once under "lee".
    if (last !== first) this.placeIn(last, position, place);
  }

  private placeIn(id: number, position: number, place: (list: number[], position: number) => void): void {
    const term = this.terms[id];
    if (term) place(term.positions, position);
  }

  private unpost(position: number): void {
    const first = this.firstNames[position];
    const last = this.lastNames[position];
    if (first !== undefined) this.drop(first, position);
    if (last !== undefined && last !== first) this.drop(last, position);
  }

  private drop(id: number, position: number): void {
    const positions = this.terms[id]?.positions;
    if (!positions) return;
    const at = lowerBound(positions, position);
    if (positions[at] === position) positions.splice(at, 1);
  }

  private remember(needle: string, positions: number[]): void {
    this.cache.set(needle, positions);
    this.cachedPositions += positions.length;
    for (const [text, oldest] of this.cache) {
      if (this.cache.size <= MAX_CACHED_QUERIES && this.cachedPositions <= MAX_CACHED_POSITIONS) break;
      if (text === needle) break;
      this.forget(text, oldest);
    }
  }

  private forget(text: string, positions: number[]): void {
    this.cache.delete(text);
    this.cachedPositions -= positions.length;
  }
}

/** A customer's two names, lower-cased as the search compares them. */
interface Names {
  first: string;
  last: string;
}

function matches(names: Names, needle: string): boolean {
  return names.first.includes(needle) || names.last.includes(needle);
}

function appendPosition(list: number[], position: number): void {
  list.push(position);
}

function insertPosition(list: number[], position: number): void {
  const at = lowerBound(list, position);
  if (list[at] !== position) list.splice(at, 0, position);
}

/** The first index of the ascending `list` whose value is not below `value`. */
function lowerBound(list: readonly number[], value: number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((list[mid] ?? 0) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The ascending, de-duplicated union of ascending lists of positions below `universe`. */
export function union(lists: readonly (readonly number[])[], universe: number): number[] {
  const [only] = lists;
  if (only === undefined) return [];
  if (lists.length === 1) return only.slice();
  let total = 0;
  for (const list of lists) total += list.length;
  // Marking costs a pass over every position; sorting costs more per listed
  // position. Measured at a million customers, marks win from about a
  // sixteenth of everyone listed ("lee", "son", one letter).
  return total * 16 >= universe ? unionByMarks(lists, universe) : unionBySort(lists, total);
}

function unionByMarks(lists: readonly (readonly number[])[], universe: number): number[] {
  const marks = new Uint8Array(universe);
  for (const list of lists) for (const position of list) marks[position] = 1;
  const merged: number[] = [];
  for (let position = 0; position < universe; position++) if (marks[position] === 1) merged.push(position);
  return merged;
}

function unionBySort(lists: readonly (readonly number[])[], total: number): number[] {
  const all = new Int32Array(total);
  let at = 0;
  for (const list of lists) {
    all.set(list, at);
    at += list.length;
  }
  all.sort();
  const merged: number[] = [];
  let previous = -1;
  for (const position of all) {
    if (position !== previous) merged.push(position);
    previous = position;
  }
  return merged;
}
