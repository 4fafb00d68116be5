import { existsSync } from 'node:fs';
import { appendFile, chmod, mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { importFile } from '../../src/import/producer.js';
import { importStatus, type ImportStatus } from '../../src/import/status.js';
import { samplesDir } from '../../src/paths.js';
import { startWatcher, type Watcher, type WatcherOptions } from '../../src/watch/inbox.js';
import { scrubCardNumbers } from '../../src/watch/scrub.js';
import { startPipeline, until, type Pipeline } from '../support/pipeline.js';

let pipeline: Pipeline | undefined;
afterEach(async () => {
  // The pipeline's runtime closes the watchers it adopted first.
  await pipeline?.close();
  pipeline = undefined;
});

/** A watcher on the pipeline's data dir, closed with its runtime. */
async function watch(p: Pipeline, options: Partial<WatcherOptions> = {}): Promise<Watcher> {
  // No settle time unless a test asks for one: most tests are about what follows the take.
  const watcher = await startWatcher({ runtime: p.runtime, pollMs: 50, settleMs: 0, ...options });
  p.runtime.adopt(() => watcher.close());
  return watcher;
}

const sample = (name: string): Promise<string> => readFile(path.join(samplesDir(), name), 'utf8');
const folder = (p: Pipeline, ...parts: string[]): string => path.join(p.dataDir, ...parts);
const filesIn = async (dir: string): Promise<string[]> => (await readdir(dir, { withFileTypes: true })).filter((e) => e.isFile()).map((e) => e.name).sort();
const fileAppears = (file: string): Promise<true> => until(async () => (existsSync(file) ? true : undefined), `${file} to appear`);

async function drop(p: Pipeline, relative: string, content: string): Promise<string> {
  const file = folder(p, 'inbox', relative);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, content);
  return file;
}

/** The finished imports under the pipeline's prefix, by file name. */
async function finishedImports(p: Pipeline): Promise<Map<string, ImportStatus>> {
  const imports = new Map<string, ImportStatus>();
  for (const id of await p.runtime.store.listImportIds()) {
    const status = await importStatus(p.runtime.store, id);
    if (status?.finished) imports.set(status.file, status);
  }
  return imports;
}

async function results(status: ImportStatus | undefined): Promise<Array<Record<string, string>>> {
  const text = await readFile(path.join(status?.resultsDir ?? '', 'results.csv'), 'utf8');
  return z.array(z.record(z.string(), z.string())).parse(parse(text, { columns: true, bom: true }));
}

const count = (text: string, message: string): number => text.split('\n').filter((line) => line.includes(`"msg":"${message}"`)).length;

describe('the inbox watcher, on real Redis and the sandbox', () => {
  it('takes files of each kind once complete, imports each once, and moves it to done/ when its results are written', async () => {
    pipeline = await startPipeline();
    await watch(pipeline, { cardRetentionMs: 60_000 });
    await drop(pipeline, 'customers/customers.csv', await sample('customers.csv'));
    await drop(pipeline, 'signups/signups.csv', await sample('signups.csv'));
    // Directly in inbox/: the kind comes from the headers.
    await drop(pipeline, 'cards.csv', await sample('cards.csv'));
    // Still being written: never taken while it ends in .part.
    const part = await drop(pipeline, 'customers/late.csv.part', 'FirstName,LastName,EmailAddress\nLate,Watcher,late1@example.com\n');

    for (const name of ['customers.csv', 'signups.csv', 'cards.csv']) await fileAppears(folder(pipeline, 'done', name));
    expect(existsSync(part)).toBe(true);
    await appendFile(part, 'Later,Watcher,late2@example.com\n');
    await rename(part, part.replace(/\.part$/, ''));
    await fileAppears(folder(pipeline, 'done', 'late.csv'));

    // Each settled exactly once: one file each in done/, nothing left behind, one import each.
    expect(await filesIn(folder(pipeline, 'done'))).toEqual(['cards.csv', 'customers.csv', 'late.csv', 'signups.csv']);
    for (const kind of ['customers', 'signups', 'cards']) {
      expect(await filesIn(folder(pipeline, 'inbox', kind))).toEqual([]);
      expect(await filesIn(folder(pipeline, 'processing', kind))).toEqual([]);
    }
    expect(await filesIn(folder(pipeline, 'failed'))).toEqual([]);
    expect(await pipeline.runtime.store.listImportIds()).toHaveLength(4);
    const logs = pipeline.logs();
    expect(count(logs, 'inbox file taken')).toBe(4);
    expect(count(logs, 'inbox file enqueued')).toBe(4);
    expect(count(logs, 'inbox file settled')).toBe(4);

    const imports = await finishedImports(pipeline);
    expect([...imports.keys()].sort()).toEqual(['cards.csv', 'customers.csv', 'late.csv', 'signups.csv']);
    expect(imports.get('cards.csv')?.kind).toBe('cards');
    expect(imports.get('signups.csv')?.kind).toBe('signups');
    const customers = pipeline.sandbox.store.customers();
    const once = (email: string | undefined): number => customers.filter((c) => c.EmailAddress === email).length;
    const customerRows = await results(imports.get('customers.csv'));
    expect(customerRows.filter((r) => r._status === 'created').length).toBeGreaterThan(0);
    for (const row of customerRows.filter((r) => r._status === 'created')) expect(once(row.EmailAddress)).toBe(1);
    const signupRows = await results(imports.get('signups.csv'));
    expect(signupRows.filter((r) => r._status === 'signed-up').length).toBeGreaterThan(0);
    for (const row of signupRows.filter((r) => r._status === 'signed-up')) expect(once(row['Customer.EmailAddress'])).toBe(1);
    expect((await results(imports.get('cards.csv'))).filter((r) => r._status === 'updated').length).toBeGreaterThan(0);
    // The late file was read whole: both rows, each created once.
    expect((await results(imports.get('late.csv'))).map((r) => r._status)).toEqual(['created', 'created']);
    expect([once('late1@example.com'), once('late2@example.com')]).toEqual([1, 1]);
  });

  it('takes a file only once its size and mtime hold over two polls', async () => {
    pipeline = await startPipeline();
    // No timer passes in this test: each scan() is one poll.
    const watcher = await watch(pipeline, { pollMs: 3_600_000 });
    const growing = await drop(pipeline, 'customers/growing.csv', 'FirstName,LastName\nGrow,One\n');
    await watcher.scan();
    await appendFile(growing, 'Grow,Two\n');
    await watcher.scan();
    expect(existsSync(growing)).toBe(true);
    await appendFile(growing, 'Grow,Three\n');
    await watcher.scan();
    expect(existsSync(growing)).toBe(true);
    await watcher.scan();
    expect(existsSync(growing)).toBe(false);
    expect(await filesIn(folder(pipeline, 'processing', 'customers'))).toEqual(['growing.csv']);

    await until(async () => {
      await watcher.scan();
      return existsSync(folder(pipeline!, 'done', 'growing.csv')) ? true : undefined;
    }, 'growing.csv to be done');
    const imports = await finishedImports(pipeline);
    expect((await results(imports.get('growing.csv'))).map((r) => r.LastName)).toEqual(['One', 'Two', 'Three']);
  });

  it('resumes the files found in processing/ at start: an import already finished is not run again, a fresh one is imported', async () => {
    pipeline = await startPipeline();
    const finished = folder(pipeline, 'processing', 'customers', 'finished.csv');
    const fresh = folder(pipeline, 'processing', 'customers', 'fresh.csv');
    await mkdir(path.dirname(finished), { recursive: true });
    await writeFile(finished, 'FirstName,LastName,EmailAddress\nResumed,Before,resumed.before@example.com\n');
    await writeFile(fresh, 'FirstName,LastName,EmailAddress\nResumed,After,resumed.after@example.com\n');
    // A watcher that crashed after the import of finished.csv settled, before moving it to done/.
    const first = await importFile({ file: finished, inboxFolder: path.dirname(finished) }, { store: pipeline.runtime.store, queues: pipeline.runtime.queues, keyring: pipeline.runtime.keyring, logger: pipeline.runtime.logger });
    await until(async () => ((await importStatus(pipeline!.runtime.store, first.importId))?.finished ? true : undefined), 'the first import to finish');

    await watch(pipeline);
    await fileAppears(folder(pipeline, 'done', 'finished.csv'));
    await fileAppears(folder(pipeline, 'done', 'fresh.csv'));
    expect(await filesIn(folder(pipeline, 'processing', 'customers'))).toEqual([]);
    expect(await pipeline.runtime.store.listImportIds()).toHaveLength(2);
    const customers = pipeline.sandbox.store.customers();
    expect(customers.filter((c) => c.EmailAddress === 'resumed.before@example.com')).toHaveLength(1);
    expect(customers.filter((c) => c.EmailAddress === 'resumed.after@example.com')).toHaveLength(1);
    expect(count(pipeline.logs(), 'inbox file already imported (same bytes); waiting for its results')).toBe(1);
  });

  it('moves a rejected file to failed/ with <name>.error.txt saying why, never over an earlier one', async () => {
    pipeline = await startPipeline();
    await watch(pipeline);
    await drop(pipeline, 'customers/bad.csv', 'FirstName,LastName,EmailAdress\nAda,Lovelace,ada@example.com\n');
    await drop(pipeline, 'mystery.csv', 'Colour,Size\nred,42\n');
    await fileAppears(folder(pipeline, 'failed', 'bad.csv.error.txt'));
    await fileAppears(folder(pipeline, 'failed', 'mystery.csv.error.txt'));
    expect(await readFile(folder(pipeline, 'failed', 'bad.csv.error.txt'), 'utf8')).toMatch(/bad\.csv was rejected[^]*"EmailAdress" \(did you mean "EmailAddress"\?\)[^]*Nothing of it was imported/);
    expect(await readFile(folder(pipeline, 'failed', 'mystery.csv.error.txt'), 'utf8')).toContain('inbox/customers/');

    // The same name again: kept beside the first, with a timestamp.
    await drop(pipeline, 'customers/bad.csv', 'FirstName,LastName,Shoe Size\nAda,Lovelace,38\n');
    const second = await until(async () => (await filesIn(folder(pipeline!, 'failed'))).find((name) => /^bad-\d{8}T\d{9}Z\.csv$/.test(name)), 'the second bad.csv in failed/');
    expect(await readFile(folder(pipeline, 'failed', `${second}.error.txt`), 'utf8')).toContain('"Shoe Size"');
    expect(await readFile(folder(pipeline, 'failed', 'bad.csv'), 'utf8')).toContain('EmailAdress');
    expect(await filesIn(folder(pipeline, 'done'))).toEqual([]);
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
  });

  it('deletes processed files holding card data: at once by default, after the retention when one is given', async () => {
    pipeline = await startPipeline();
    const watcher = await watch(pipeline);
    await drop(pipeline, 'signups/signups.csv', await sample('signups.csv'));
    await drop(pipeline, 'customers/customers.csv', await sample('customers.csv'));
    await fileAppears(folder(pipeline, 'done', 'customers.csv'));
    await until(async () => ((await finishedImports(pipeline!)).has('signups.csv') && (await filesIn(folder(pipeline!, 'processing', 'signups'))).length === 0 ? true : undefined), 'signups.csv to settle');
    expect(await filesIn(folder(pipeline, 'done'))).toEqual(['customers.csv']);
    await watcher.close();

    await watch(pipeline, { cardRetentionMs: 1_000 });
    await drop(pipeline, 'cards/cards.csv', await sample('cards.csv'));
    await fileAppears(folder(pipeline, 'done', 'cards.csv'));
    await until(async () => (existsSync(folder(pipeline!, 'done', 'cards.csv')) ? undefined : true), 'cards.csv to be deleted after its retention');
    expect(await filesIn(folder(pipeline, 'done'))).toEqual(['customers.csv']);
  });

  it('deletes a processed customers file holding passwords like a card file; one whose Password column is empty goes to done/', async () => {
    pipeline = await startPipeline();
    await watch(pipeline);
    await drop(pipeline, 'customers/blank-passwords.csv', 'FirstName,LastName,Password\nBlank,Password,\n');
    await drop(pipeline, 'customers/passwords.csv', 'FirstName,LastName,Password\nWith,Password,s3cret-Pa55\n');
    await fileAppears(folder(pipeline, 'done', 'blank-passwords.csv'));
    await until(async () => ((await finishedImports(pipeline!)).has('passwords.csv') && (await filesIn(folder(pipeline!, 'processing', 'customers'))).length === 0 ? true : undefined), 'passwords.csv to settle');
    expect(await filesIn(folder(pipeline, 'done'))).toEqual(['blank-passwords.csv']);
    expect(pipeline.logs()).not.toContain('s3cret-Pa55');
  });

  it('takes a file only after its size and mtime have held for the settle time, measured again after each change', async () => {
    pipeline = await startPipeline();
    let now = 1_000_000;
    const watcher = await watch(pipeline, { pollMs: 3_600_000, settleMs: 5_000, now: () => now });
    const file = await drop(pipeline, 'customers/slow.csv', 'FirstName,LastName\nSlow,One\n');
    await watcher.scan();
    now += 4_999;
    await watcher.scan();
    await watcher.scan();
    expect(existsSync(file)).toBe(true);
    // A pause in the copy, then more: the settle time starts again from this poll.
    await appendFile(file, 'Slow,Two\n');
    await watcher.scan();
    now += 4_999;
    await watcher.scan();
    expect(existsSync(file)).toBe(true);
    now += 1;
    await watcher.scan();
    expect(existsSync(file)).toBe(false);
    await until(async () => {
      await watcher.scan();
      return existsSync(folder(pipeline!, 'done', 'slow.csv')) ? true : undefined;
    }, 'slow.csv to be done');
    expect((await results((await finishedImports(pipeline)).get('slow.csv'))).map((r) => r.LastName)).toEqual(['One', 'Two']);
  });

  it('waits for a file written in two bursts that stops inside a quoted cell or a record, and imports every row once it is whole', async () => {
    pipeline = await startPipeline();
    const watcher = await watch(pipeline, { pollMs: 3_600_000 });
    const rows = Array.from({ length: 40 }, (_, i) => `Burst,Row${i + 1},burst${i + 1}@example.com,"Suite ${i + 1}, Floor 2"`);
    const whole = ['FirstName,LastName,EmailAddress,AddressLine1', ...rows].join('\n') + '\n';
    // The first burst ends in the middle of row 21's quoted address.
    const cut = whole.indexOf('"Suite 21,') + '"Suite 2'.length;
    const file = await drop(pipeline, 'customers/bursts.csv', whole.slice(0, cut));
    for (let i = 0; i < 4; i++) await watcher.scan();
    expect(existsSync(file)).toBe(true);
    expect(count(pipeline.logs(), 'inbox file does not end with a whole record; waiting for the rest')).toBe(1);
    expect(pipeline.logs()).toContain('"ends":"inside a quoted cell"');

    // Cut after a record's first cells (no quote open): not whole either.
    const early = whole.indexOf('Burst,Row31,') + 'Burst,Row3'.length;
    await appendFile(file, whole.slice(cut, early));
    for (let i = 0; i < 3; i++) await watcher.scan();
    expect(existsSync(file)).toBe(true);
    expect(pipeline.logs()).toContain('"ends":"inside a record"');
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);

    await appendFile(file, whole.slice(early));
    await until(async () => {
      await watcher.scan();
      return existsSync(folder(pipeline!, 'done', 'bursts.csv')) ? true : undefined;
    }, 'bursts.csv to be done');
    const imported = await results((await finishedImports(pipeline)).get('bursts.csv'));
    expect(imported).toHaveLength(40);
    expect(imported.map((r) => r.AddressLine1)).toEqual(rows.map((_, i) => `Suite ${i + 1}, Floor 2`));
    expect(imported.every((r) => r._status === 'created')).toBe(true);
    expect(await pipeline.runtime.store.listImportIds()).toHaveLength(1);
  });

  it('takes a whole file without a final line end', async () => {
    pipeline = await startPipeline();
    await watch(pipeline);
    await drop(pipeline, 'customers/no-final-newline.csv', 'FirstName,LastName,EmailAddress\nNo,Newline,no.newline@example.com');
    await fileAppears(folder(pipeline, 'done', 'no-final-newline.csv'));
    const imported = await results((await finishedImports(pipeline)).get('no-final-newline.csv'));
    expect(imported.map((r) => r.EmailAddress)).toEqual(['no.newline@example.com']);
  });

  it('refuses loudly a file that changes after it was taken: failed/ with an error file, never done/', async () => {
    pipeline = await startPipeline();
    const watcher = await watch(pipeline, { pollMs: 3_600_000 });
    await drop(pipeline, 'customers/changing.csv', 'FirstName,LastName,EmailAddress\nChange,One,change1@example.com\n');
    await watcher.scan();
    await watcher.scan();
    const taken = folder(pipeline, 'processing', 'customers', 'changing.csv');
    expect(existsSync(taken)).toBe(true);
    await until(async () => (count(pipeline!.logs(), 'inbox file enqueued') === 1 ? true : undefined), 'the import to be enqueued');
    // A writer that kept its file open goes on writing after the take.
    await appendFile(taken, 'Change,Two,change2@example.com\n');
    const errorFile = folder(pipeline, 'failed', 'changing.csv.error.txt');
    await until(async () => {
      await watcher.scan();
      return existsSync(errorFile) ? true : undefined;
    }, 'changing.csv to be refused');
    const text = await readFile(errorFile, 'utf8');
    expect(text).toMatch(/^changing\.csv changed while being imported \(its size went from \d+ to \d+ bytes\)/);
    expect(text).toContain('The changes were not imported');
    expect(await filesIn(folder(pipeline, 'done'))).toEqual([]);
    expect(await filesIn(folder(pipeline, 'processing', 'customers'))).toEqual([]);
    expect(count(pipeline.logs(), 'inbox file settled')).toBe(0);
    expect(pipeline.logs()).toContain('"msg":"inbox file rejected"');
    // What was imported is the file as taken: the row written afterwards never reached the service.
    const emails = pipeline.sandbox.store.customers().map((c) => c.EmailAddress);
    expect(emails).toContain('change1@example.com');
    expect(emails).not.toContain('change2@example.com');
  });

  it('refuses a file that changed before its import read it, with nothing of it imported', async () => {
    pipeline = await startPipeline();
    // The first attempt fails unexpectedly (the data dir's journal/ is a file), so the import is tried
    // again later: the file changes in between, and the retry must find it changed before reading it.
    const journal = folder(pipeline, 'journal');
    await writeFile(journal, 'not a folder');
    const watcher = await watch(pipeline, { pollMs: 3_600_000, retryMs: 0 });
    await drop(pipeline, 'customers/retried.csv', 'FirstName,LastName,EmailAddress\nRetried,One,retried1@example.com\n');
    await watcher.scan();
    await watcher.scan();
    const taken = folder(pipeline, 'processing', 'customers', 'retried.csv');
    await until(async () => (count(pipeline!.logs(), 'inbox file could not be imported; trying again later') === 1 ? true : undefined), 'the first attempt to fail');
    await appendFile(taken, 'Retried,Two,retried2@example.com\n');
    await rm(journal);
    const errorFile = folder(pipeline, 'failed', 'retried.csv.error.txt');
    await until(async () => {
      await watcher.scan();
      return existsSync(errorFile) ? true : undefined;
    }, 'retried.csv to be refused');
    const text = await readFile(errorFile, 'utf8');
    expect(text).toMatch(/^retried\.csv changed while being imported \(its size went from \d+ to \d+ bytes\)/);
    expect(text).toContain('Nothing of it was imported.');
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
    expect(pipeline.sandbox.store.customers().map((c) => c.EmailAddress)).not.toContain('retried1@example.com');
    expect(count(pipeline.logs(), 'inbox file enqueued')).toBe(0);
  });

  it('never keeps card data in failed/: a rejected card file is deleted, its error file kept owner-only with digits masked', async () => {
    pipeline = await startPipeline();
    await watch(pipeline);
    // A cards file with a misspelt column: rejected as a whole.
    await drop(pipeline, 'cards/cards-typo.csv', 'PaymentMethodKey,AccountNumbr,ExpirationDate,CVCode\n6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01,4111111111111111,1230,737\n');
    // Undecidable headers in inbox/, card numbers in the rows: its kind is unknown, its content is not.
    await drop(pipeline, 'mystery-cards.csv', 'Name,Card,Code\nAda,5555 5555 5555 4444,123\n');
    // A card number quoted back in a reason (here, as a column name): masked in the error file.
    await drop(pipeline, 'customers/pasted.csv', 'FirstName,LastName,4111.1111.1111.1111\nAda,Lovelace,x\n');
    // A customers file with a typo holds no card data: kept, owner-only.
    await drop(pipeline, 'customers/typo.csv', 'FirstName,LastName,EmailAdress\nAda,Lovelace,ada@example.com\n');
    for (const name of ['cards-typo.csv', 'mystery-cards.csv', 'pasted.csv', 'typo.csv']) await fileAppears(folder(pipeline, 'failed', `${name}.error.txt`));
    await fileAppears(folder(pipeline, 'failed', 'typo.csv'));

    expect(await filesIn(folder(pipeline, 'failed'))).toEqual(['cards-typo.csv.error.txt', 'mystery-cards.csv.error.txt', 'pasted.csv.error.txt', 'typo.csv', 'typo.csv.error.txt']);
    for (const name of await filesIn(folder(pipeline, 'failed'))) {
      const file = folder(pipeline, 'failed', name);
      expect((await stat(file)).mode & 0o777, name).toBe(0o600);
      const text = await readFile(file, 'utf8');
      for (const digits of ['4111111111111111', '5555 5555 5555 4444', '5555555555554444', '4111.1111.1111.1111']) expect(text, name).not.toContain(digits);
    }
    const cardsError = await readFile(folder(pipeline, 'failed', 'cards-typo.csv.error.txt'), 'utf8');
    expect(cardsError).toContain('"AccountNumbr"');
    expect(cardsError).toContain('held card data or passwords, so it was deleted');
    expect(await readFile(folder(pipeline, 'failed', 'mystery-cards.csv.error.txt'), 'utf8')).toContain('held card data or passwords, so it was deleted');
    expect(await readFile(folder(pipeline, 'failed', 'pasted.csv.error.txt'), 'utf8')).toContain('************1111');
    expect(await readFile(folder(pipeline, 'failed', 'typo.csv.error.txt'), 'utf8')).not.toContain('card data');
    expect(count(pipeline.logs(), 'inbox file rejected; deleted, as it holds card data')).toBe(3);
    expect(pipeline.logs()).not.toMatch(/4111111111111111|5555 5555 5555 4444|4111\.1111\.1111\.1111/);
    expect(await pipeline.runtime.store.listImportIds()).toEqual([]);
  });

  it('deletes card files rejected for want of a card key, keeping only the error file', async () => {
    pipeline = await startPipeline({ config: { cardKey: undefined } });
    await watch(pipeline);
    await drop(pipeline, 'signups/signups.csv', await sample('signups.csv'));
    await fileAppears(folder(pipeline, 'failed', 'signups.csv.error.txt'));
    expect(await filesIn(folder(pipeline, 'failed'))).toEqual(['signups.csv.error.txt']);
    const text = await readFile(folder(pipeline, 'failed', 'signups.csv.error.txt'), 'utf8');
    expect(text).toContain('SUBSYNC_CARD_KEY');
    expect(text).toContain('held card data or passwords, so it was deleted');
  });

  it('empties failed/ of files past the retention, of card data in clear left there, and of modes others can read', async () => {
    pipeline = await startPipeline();
    const failed = folder(pipeline, 'failed');
    await mkdir(failed, { recursive: true });
    const put = async (name: string, text: string, ageDays: number): Promise<string> => {
      const file = path.join(failed, name);
      await writeFile(file, text, { mode: 0o644 });
      await chmod(file, 0o644);
      const when = new Date(Date.now() - ageDays * 86_400_000);
      await utimes(file, when, when);
      return file;
    };
    // Left by an older subsync: a clear card file, an error file quoting a card number, both 0644.
    const oldCards = await put('cards.csv', 'PaymentMethodKey,AccountNumber,ExpirationDate,CVCode\n6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01,4111111111111111,1230,737\n', 2);
    const oldError = await put('cards.csv.error.txt', 'cards.csv was rejected.\n- bad value 4111-1111-1111-1111 in row 1\n', 2);
    const kept = await put('customers.csv', 'FirstName,LastName,EmailAdress\nAda,Lovelace,ada@example.com\n', 29);
    const expired = await put('expired.csv', 'FirstName,LastName,EmailAdress\nOld,File,old@example.com\n', 31);
    const expiredError = await put('expired.csv.error.txt', 'expired.csv was rejected.\n', 31);

    await watch(pipeline);
    await until(async () => (existsSync(oldCards) || existsSync(expired) || existsSync(expiredError) ? undefined : true), 'failed/ to be swept');
    await until(async () => ((await stat(kept)).mode & 0o777) === 0o600 && ((await stat(oldError)).mode & 0o777) === 0o600 ? true : undefined, 'modes to be 0600');
    expect(await filesIn(failed)).toEqual(['cards.csv.error.txt', 'customers.csv']);
    const scrubbed = await readFile(oldError, 'utf8');
    expect(scrubbed).toContain('bad value ************1111 in row 1');
    // The retention still counts from when it got there.
    expect(Date.now() - (await stat(oldError)).mtimeMs).toBeGreaterThan(86_400_000);
    expect(pipeline.logs()).toContain('"msg":"failed/ file held card data in clear; deleted"');
    expect(count(pipeline.logs(), 'failed/ file deleted (retention over)')).toBe(2);
  });

  it('keeps failed/ files for a shorter retention when told', async () => {
    pipeline = await startPipeline();
    await watch(pipeline, { failedRetentionMs: 3_600_000 });
    const file = folder(pipeline, 'failed', 'two-hours.csv');
    await writeFile(file, 'FirstName,LastName\nA,B\n');
    const when = new Date(Date.now() - 7_200_000);
    await utimes(file, when, when);
    await until(async () => (existsSync(file) ? undefined : true), 'two-hours.csv to be deleted');
  });
});

describe('scrubCardNumbers', () => {
  it('masks every run of 12+ digits, whatever the separators, to its last four', () => {
    expect(scrubCardNumbers('card 4111 1111 1111 1111 refused')).toBe('card ************1111 refused');
    expect(scrubCardNumbers('4111-1111-1111-1111, 4111.1111.1111.1111, 4111\t1111 - 1111 1111')).toBe('************1111, ************1111, ************1111');
    expect(scrubCardNumbers('378282246310005')).toBe('***********0005');
    expect(scrubCardNumbers('12345678901234567890123')).toBe('*******************0123');
    // Shorter runs stay: row numbers, dates, phone numbers.
    expect(scrubCardNumbers('row 12, 2026-11-24, +33 1 42 60 00 00')).toBe('row 12, 2026-11-24, +33 1 42 60 00 00');
  });
});
