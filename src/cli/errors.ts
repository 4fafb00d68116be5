/** `subsync errors IMPORT_ID [--json]`: the import's invalid, failed and needs-review rows grouped by cause. */
import type { Command } from 'commander';
import { errorGroups } from '../import/errorGroups.js';
import { withRuntime } from './context.js';

/** Row numbers shown per group in text; `--json` gives them all. */
const SAMPLE_ROWS = 10;

export function register(program: Command): void {
  program
    .command('errors')
    .description('the invalid, failed and needs-review rows of an import grouped by cause: a stable code per group (for retry --group), its reason, count and rows')
    .argument('<importId>', 'the import id')
    .option('--json', 'one JSON object instead of text')
    .action((importId: string, flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const report = await errorGroups(runtime.store, importId);
        if (flags.json) {
          process.stdout.write(`${JSON.stringify(report)}\n`);
          return;
        }
        if (report.groups.length === 0) {
          process.stdout.write(`import ${importId} has no invalid, failed or needs-review rows\n`);
          return;
        }
        const width = Math.max(...report.groups.map((g) => String(g.count).length));
        for (const g of report.groups) {
          const shown = g.rows.slice(0, SAMPLE_ROWS).join(', ');
          const more = g.count > SAMPLE_ROWS ? ` and ${g.count - SAMPLE_ROWS} more` : '';
          process.stdout.write(`${String(g.count).padStart(width)}  ${g.code}  ${g.reason}  rows ${shown}${more}\n`);
        }
      }),
    );
}
