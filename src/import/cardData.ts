import type { Queues } from '../queue/queues.js';
import { getRowJob } from '../queue/queues.js';

/**
 * A settled import lets go of its card data: the sealed
 * card cells of the jobs it keeps (failed and needs-review rows, for the
 * dashboard) are removed. Completed jobs are removed at once anyway, batch
 * jobs drop a row's cells before it settles, and the ledger only ever held
 * masked cells. Retrying such a row asks for the card again.
 *
 * `keptRows`: the rows that may keep a job, which the finaliser finds while
 * it reads the ledger for the results files.
 */
export async function forgetCardData(queues: Queues, importId: string, keptRows: Iterable<number>): Promise<number> {
  let forgotten = 0;
  for (const row of keptRows) {
    const job = await getRowJob(queues, importId, row);
    if (job?.data.secrets === undefined) continue;
    const { secrets: _forgotten, ...rest } = job.data;
    await job.updateData(rest);
    forgotten++;
  }
  return forgotten;
}
