import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { killAll, requireBuiltCli, subsync } from '../support/cli.js';
import { customerInput } from '../support/bodies.js';
import { envOf, startPipeline, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
beforeAll(requireBuiltCli);
afterEach(async () => {
  killAll();
  await pipeline?.close();
  pipeline = undefined;
});

const Report = z.object({ present: z.boolean(), customers: z.number().optional(), ageSeconds: z.number().nullable().optional(), bytesPerCustomer: z.number().optional(), refresh: z.string().optional(), requests: z.number().optional() });

async function json(args: string[], p: Pipeline): Promise<z.infer<typeof Report>> {
  const run = subsync(args, envOf(p));
  const { code } = await run.exited;
  expect(code, run.stderr()).toBe(0);
  return Report.parse(JSON.parse(run.stdout()));
}

describe('subsync index', () => {
  it('status says there is none; refresh builds it by paging, then reads only what is new; status shows size, age and memory', async () => {
    pipeline = await startPipeline({ workers: false });
    for (let i = 0; i < 230; i++) pipeline.sandbox.store.createCustomer(customerInput({ FirstName: `F${i}`, EmailAddress: `f${i}@example.com` }));
    const total = pipeline.sandbox.store.customers().length;
    expect(await json(['index', 'status', '--json'], pipeline)).toEqual({ present: false });
    const text = subsync(['index', 'status'], envOf(pipeline));
    await text.exited;
    expect(text.stdout()).toMatch(/no customer index yet: `subsync index refresh` builds one/);

    const built = await json(['index', 'refresh', '--json'], pipeline);
    expect(built).toMatchObject({ refresh: 'full', requests: Math.ceil(total / 100) + 1, present: true, customers: total });
    pipeline.sandbox.store.createCustomer(customerInput({ FirstName: 'Newer', EmailAddress: 'newer@example.com' }));
    expect(await json(['index', 'refresh', '--json'], pipeline)).toMatchObject({ refresh: 'delta', requests: 1, customers: total + 1 });

    const status = await json(['index', 'status', '--json'], pipeline);
    expect(status.ageSeconds).toBeGreaterThanOrEqual(0);
    expect(status.bytesPerCustomer).toBeGreaterThan(0);
    expect(status.bytesPerCustomer).toBeLessThanOrEqual(64);
  });
});
