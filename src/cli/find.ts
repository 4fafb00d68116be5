/** `subsync find TEXT [--json] [--limit N]`: rows of any import by email, name, CustomerID or PaymentMethodKey. */
import { InvalidArgumentError, type Command } from 'commander';
import { findRows } from '../import/find.js';
import { withRuntime } from './context.js';
import { parseNonNegativeInt } from './options.js';

function parseLimit(value: string): number {
  const n = parseNonNegativeInt(value);
  if (n < 1) throw new InvalidArgumentError('expected a whole number, 1 or more');
  return n;
}

export function register(program: Command): void {
  program
    .command('find')
    .description('rows of any import Redis still holds, by email, first or last name (or both), CustomerID or PaymentMethodKey; card data is never searched')
    .argument('<text>', 'what to look for: a whole email, name or id')
    .option('--json', 'one JSON object per row, one per line')
    .option('--limit <n>', 'rows to list at most', parseLimit, 50)
    .action((text: string, flags: { json?: boolean; limit: number }) =>
      withRuntime(async (runtime) => {
        const result = await findRows(runtime.store, text, { limit: flags.limit });
        if (flags.json) {
          for (const hit of result.hits) process.stdout.write(`${JSON.stringify(hit)}\n`);
        } else {
          for (const h of result.hits) {
            const name = [h.firstName, h.lastName].filter((n) => n !== '').join(' ');
            const ids = [h.customerId && `CustomerID ${h.customerId}`, h.paymentMethodKey && `PaymentMethodKey ${h.paymentMethodKey}`].filter(Boolean).join('  ');
            process.stdout.write(`${h.importId}  row ${h.row}  ${h.status}  ${h.file}  ${[name, h.email, ids].filter((p) => p !== '').join('  ')}  (matched ${h.matched})\n`);
          }
        }
        // On stderr: stdout stays the rows alone, for scripts.
        if (result.refused) process.stderr.write(`"${result.shown}" looks like a card number: card data is never searched\n`);
        else if (result.hits.length === 0) process.stderr.write(`no rows match "${result.shown}" in ${result.imports} import(s)\n`);
        if (result.more) process.stderr.write(`more rows match than shown (--limit ${flags.limit}); search a whole email or id to narrow it\n`);
      }),
    );
}
