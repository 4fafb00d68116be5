import { readFile } from 'node:fs/promises';
import { parse } from 'csv-parse/sync';
import { z } from 'zod';
import { CUSTOMER_FIELDS, CUSTOMER_INPUT_FIELDS, type Customer, type CustomerInput } from '../../src/api/schemas/index.js';
import { enqueueExport } from '../../src/export/job.js';
import type { ExportRequest } from '../../src/export/request.js';
import { createExportStore, type ExportRecord } from '../../src/export/state.js';
import type { ExportManifest } from '../../src/export/writer.js';
import { escapeFormula } from '../../src/results/formula.js';
import type { Sandbox } from '../../src/sandbox/server.js';
import type { SandboxStore } from '../../src/sandbox/store.js';
import { until, type Pipeline } from './pipeline.js';

/** The environment a spawned subsync needs to share the test's Redis prefix, sandbox and data dir. */
export function cliEnv(p: Pipeline): NodeJS.ProcessEnv {
  return {
    REDIS_URL: 'redis://127.0.0.1:6379',
    // The tests' Redis persists nothing: `worker` and `start` refuse it unless told to accept that.
    SUBSYNC_REDIS_ACCEPT_LOSS: 'true',
    SUBSYNC_QUEUE_PREFIX: p.prefix,
    SUBSYNC_API_URL: p.sandbox.url,
    SUBSYNC_DATA_DIR: p.dataDir,
    SUBSYNC_LOG_LEVEL: 'warn',
  };
}

/** First names that try a CSV writer: quotes, commas, line breaks, unicode, formula triggers. */
const FIRST_NAMES = ['Zoë', 'Jean "JJ"', 'Ana, María', 'Line\nBreak', 'Ōtani', '=cmd|calc', 'Søren\r', '@home', "D'Arcy", '+Plus', 'Émile 🎉'];
const CITIES = ['São Paulo', 'Zürich, CH', 'Kraków', '"Quoted" Town', '-Minus'];

/** Creates `count` customers straight in the sandbox's store (fast), each field exercised. */
export function createCustomers(store: SandboxStore, count: number, tag = 'Export'): void {
  for (let i = 1; i <= count; i++) {
    const blank = Object.fromEntries(CUSTOMER_INPUT_FIELDS.map((f) => [f, ''])) as Record<keyof CustomerInput, string>;
    const input: CustomerInput = {
      ...blank,
      FirstName: `${FIRST_NAMES[i % FIRST_NAMES.length] ?? 'X'}${i}`,
      LastName: `${tag}-${i}`,
      MiddleName: i % 7 === 0 ? 'M,\n"mid"' : '',
      Company: i % 5 === 0 ? 'Crème, Brûlée & Co' : '',
      EmailAddress: i % 2 === 0 ? `c${i}@example.com` : '',
      AddressLine1: `${i} Rue de l'Église`,
      City: CITIES[i % CITIES.length] ?? '',
      CountryCode: i % 3 === 0 ? 'FRA' : '',
      MobileNumber: i % 4 === 0 ? null : `+33 6 ${String(i).padStart(8, '0')}`,
      WebPageURL: i % 11 === 0 ? 'https://例え.jp/パス?a=1,b=2' : '',
      Password: `pw-${i}`,
    };
    store.createCustomer(input);
  }
}

/** A search request the sandbox saw: `contains` and the page it asked for. */
export interface SearchSeen {
  contains: string;
  skip: number;
  take: number;
  /** Set by the test: which phase of the test it came in. */
  phase: string;
}

/** Logs every search request the sandbox handles (the test's own request log); `phase` labels what follows. */
export function logSearches(sandbox: Sandbox, extra?: (seen: SearchSeen, all: readonly SearchSeen[]) => void) {
  const seen: SearchSeen[] = [];
  let phase = 'first';
  sandbox.intercept((request) => {
    if (request.endpoint !== 'searchCustomers') return;
    const entry = { contains: request.query.get('contains') ?? '', skip: Number(request.query.get('skip')), take: Number(request.query.get('take')), phase };
    seen.push(entry);
    extra?.(entry, seen);
  });
  return {
    seen,
    setPhase: (next: string) => {
      phase = next;
    },
  };
}

export interface FinishedExport {
  record: ExportRecord;
  manifest: ExportManifest;
}

/** Enqueues an export and waits until the pipeline's control worker has written it. */
export async function exportNow(pipeline: Pipeline, request: Partial<ExportRequest> = {}, timeoutMs = 60_000): Promise<FinishedExport> {
  const exportId = await enqueueExport(pipeline.runtime.queues.control, { format: 'csv', gzip: false, ...request });
  return waitForDone(pipeline, exportId, timeoutMs);
}

export async function waitForDone(pipeline: Pipeline, exportId: string, timeoutMs = 60_000): Promise<FinishedExport> {
  const store = createExportStore(pipeline.runtime.redis, pipeline.prefix);
  const record = await until(
    async () => {
      const r = await store.get(exportId);
      if (r?.status === 'failed') throw new Error(`export failed: ${r.error ?? '?'}`);
      return r?.status === 'done' ? r : undefined;
    },
    `export ${exportId} to finish`,
    timeoutMs,
  );
  return { record, manifest: await readManifest(record.manifest ?? '') };
}

export async function readManifest(file: string): Promise<ExportManifest> {
  return JSON.parse(await readFile(file, 'utf8')) as ExportManifest;
}

/** The export's CSV as rows of cells, header first. */
export async function readCsvRows(file: string): Promise<string[][]> {
  return z.array(z.array(z.string())).parse(parse(await readFile(file, 'utf8'), { bom: true }));
}

/** What the export should hold for a customer: every field, Password empty, formula-escaped, null as empty. */
export const expectedCsvRow = (customer: Customer): string[] => CUSTOMER_FIELDS.map((f) => (f === 'Password' ? '' : escapeFormula(customer[f] ?? '')));

export const expectedJson = (customer: Customer): Record<string, unknown> => ({ ...customer, Password: '' });
