/**
 * `make` with its answers kept for keys asked again soon: at most `size` of
 * them, all forgotten at once when full (cheaper than an LRU's bookkeeping;
 * the keys asked again are those of the rows being worked on at the moment).
 * `make` must answer the same for the same key, and its answers must not be
 * changed by their callers.
 */
export function keptRecently<V>(size: number, make: (key: string) => V): (key: string) => V {
  const kept = new Map<string, V>();
  return (key) => {
    let value = kept.get(key);
    if (value === undefined) {
      value = make(key);
      if (kept.size >= size) kept.clear();
      kept.set(key, value);
    }
    return value;
  };
}
