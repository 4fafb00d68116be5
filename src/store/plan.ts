import type { ColumnPlan } from '../csv/columns.js';
import type { ImportRecord } from './importStore.js';

/** The column plan of an import, rebuilt from its record (the producer validated it). */
export function planOf(record: ImportRecord): ColumnPlan {
  const index = new Map<string, number>();
  record.paths.forEach((p, i) => {
    if (p !== '') index.set(p, i);
  });
  return { kind: record.kind, headers: record.headers, paths: record.paths, index };
}
