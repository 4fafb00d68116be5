import type { Queues } from '../queue/queues.js';
import { getRowJob } from '../queue/queues.js';
import type { ImportStore } from '../store/importStore.js';

/**
 * A settled import lets go of its card data (DESIGN section 6): the sealed
 * card cells of the jobs it keeps (failed rows, for the dashboard) are
 * removed. Completed jobs are removed at once anyway, and the ledger only
 * ever held masked cells. Retrying such a row asks for the card again.
 */
export async function forgetCardData(store: ImportStore, queues: Queues, importId: string): Promise<number> {
  const record = await store.getImport(importId);
  if (!record || record.kind === 'customers') return 0;
  let forgotten = 0;
  for await (const { row, entry } of store.rowsWithStatus(importId, new Set(['failed', 'needs-review']))) {
    if (entry.j === null) continue;
    const job = await getRowJob(queues, importId, row);
    if (job?.data.secrets === undefined) continue;
    const { secrets: _forgotten, ...rest } = job.data;
    await job.updateData(rest);
    forgotten++;
  }
  return forgotten;
}
