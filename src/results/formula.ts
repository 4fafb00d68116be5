/**
 * Spreadsheet formula injection. A spreadsheet that opens a
 * CSV evaluates a cell beginning with `=`, `+`, `-` or `@` as a formula, and
 * some also after a leading tab, CR, LF or NUL. Prefixing `'` makes the cell
 * text. csv-stringify's own `escape_formulas` misses LF and NUL, hence this.
 *
 * For every CSV file subsync writes for people: exports, dashboard
 * downloads, results.csv and errors.csv. The importer undoes exactly this
 * escape (a single `'` followed by a trigger, src/csv/text.ts), so a file
 * written here imports again to its values, e.g. a +33 phone number.
 */

/** The first characters that make a spreadsheet treat a cell as a formula. */
export const FORMULA_TRIGGERS: ReadonlySet<string> = new Set(['=', '+', '-', '@', '\t', '\r', '\n', '\0']);

/** The cell, prefixed with `'` when its first character is a formula trigger. */
export function escapeFormula(cell: string): string {
  const first = cell[0];
  return first !== undefined && FORMULA_TRIGGERS.has(first) ? `'${cell}` : cell;
}
