import { openSecrets, sealSecrets, type CardKeyring } from '../cards/crypto.js';
import type { ColumnPlan } from '../csv/columns.js';
import { RowUnrunnableError } from './interfaces.js';

/** The row's cells, its card cells restored from its sealed job data. */
export function openCells(masked: readonly string[], token: string | undefined, keyring: CardKeyring | undefined): string[] {
  const cells = [...masked];
  if (token === undefined) return cells;
  if (!keyring) throw new RowUnrunnableError('this row carries card data, and this worker has no SUBSYNC_CARD_KEY to open it');
  for (const [index, value] of Object.entries(openSecrets(keyring, token))) cells[Number(index)] = value;
  return cells;
}

/**
 * The sealed cells a row's job keeps once the row has an outcome: without
 * the CVC (kept only until then); the card number stays sealed until the
 * import settles, for a retry from the dashboard. Undefined when nothing is
 * left (or nothing can be opened).
 */
export function keptSecrets(token: string | undefined, plan: ColumnPlan, keyring: CardKeyring | undefined): string | undefined {
  if (token === undefined || !keyring) return undefined;
  const kept = Object.fromEntries(Object.entries(openSecrets(keyring, token)).filter(([index]) => !/CVCode$/.test(plan.paths[Number(index)] ?? '')));
  return Object.keys(kept).length > 0 ? sealSecrets(keyring, kept) : undefined;
}
