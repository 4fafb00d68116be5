/**
 * The most slots (times in ms) in any window of `ms`, closed at its start
 * and open at its end, as the sandbox's sliding second counts requests.
 */
export function mostInWindow(slots: readonly number[], ms: number): number {
  const sorted = [...slots].sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while ((sorted[j] ?? 0) <= (sorted[i] ?? 0) - ms) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}
