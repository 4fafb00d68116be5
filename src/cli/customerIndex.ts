/**
 * `subsync index status [--json]` and `subsync index refresh [--full]
 * [--json]`: what subsync knows of the service's customers, and bringing it
 * up to date.
 */
import type { Command } from 'commander';
import { requireApiUrl } from '../config.js';
import type { IndexMeta } from '../customers/customerIndex.js';
import { indexReport, type IndexReport } from '../customers/report.js';
import { refreshDelta, refreshFull } from '../customers/refresh.js';
import { createBudget } from '../redis/budget.js';
import { openApi, type Runtime } from '../runtime.js';
import { withRuntime } from './context.js';

function describeReport(report: IndexReport): string {
  if (!report.present) return 'no customer index yet: `subsync index refresh` builds one (an import builds it when that is cheaper than searching)\n';
  const lines = [
    `customers: ${report.customers} (the service's TotalItemCount then: ${report.totalItemCount})`,
    `built: ${report.builtAt}`,
    report.readToEndFirst
      ? 'current: not until its end is read again (Redis came back without some of its writes): the next create reads it, or `subsync index refresh`'
      : report.ageSeconds === null
        ? 'current: no (the end of the service\'s listing moved: `subsync index refresh --full`)'
        : `current as of: ${report.currentAt} (${report.ageSeconds} s ago)`,
    `listing: ${report.appendOnly ? 'append-only: new customers are read from its end' : 'not in CustomerID order: only a full refresh makes the index current'}`,
    `keys: ${report.fields?.join(', ')}`,
    `memory: ${report.bytes ?? '?'} bytes, ${report.bytesPerCustomer ?? '?'} a customer${report.ownCreatesBytes ? ` (${report.ownCreatesBytes} of them the IDs of creates past its end, dropped as the end moves)` : ''}`,
  ];
  return `${lines.join('\n')}\n`;
}

async function refresh(runtime: Runtime, full: boolean): Promise<{ kind: string; requests: number; meta: IndexMeta | undefined }> {
  const budget = createBudget(runtime.redis, runtime.store.keys, { rate: runtime.config.rate });
  const api = openApi(runtime, requireApiUrl(runtime.config), budget);
  const deps = { api, budget, index: runtime.customers, redis: runtime.redis, prefix: runtime.config.queuePrefix };
  if (!full) {
    const delta = await refreshDelta(deps);
    if (delta) return delta;
  }
  return refreshFull(deps);
}

export function register(program: Command): void {
  const index = program.command('index').description("what subsync knows of the service's customers (used to find them at about one request a row)");
  index
    .command('status')
    .description('size, age and memory of the customer index')
    .option('--json', 'JSON instead of text')
    .action((flags: { json?: boolean }) =>
      withRuntime(async (runtime) => {
        const report = await indexReport(runtime.customers);
        process.stdout.write(flags.json ? `${JSON.stringify(report)}\n` : describeReport(report));
      }),
    );
  index
    .command('refresh')
    .description('read the customers created since the index was current (or, with --full or when that cannot be done, every customer)')
    .option('--full', 'page every customer again')
    .option('--json', 'JSON instead of text')
    .action((flags: { full?: boolean; json?: boolean }) =>
      withRuntime(async (runtime) => {
        const outcome = await refresh(runtime, flags.full === true);
        const report = await indexReport(runtime.customers);
        if (flags.json) {
          process.stdout.write(`${JSON.stringify({ refresh: outcome.kind, requests: outcome.requests, ...report })}\n`);
          return;
        }
        process.stdout.write(`${outcome.kind} refresh: ${outcome.requests} request${outcome.requests === 1 ? '' : 's'}\n${describeReport(report)}`);
      }),
    );
}
