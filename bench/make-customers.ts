/**
 * Writes a customers CSV for benchmarks and load tests:
 *
 *   node dist/bench/make-customers.js OUT.csv [ROWS=10000] [--unique-tag TAG]
 *
 * Streamed (a generator through csv-stringify into the file, with
 * backpressure), so a million rows take no more memory than ten. Deterministic:
 * the same arguments write the same bytes. Names carry accents and
 * apostrophes, addresses carry commas (so they are quoted), about a quarter of
 * the MobileNumbers are empty. With `--unique-tag TAG`, every LastName ends in
 * `-TAG`, so a test can find exactly this run's customers by searching for TAG.
 */
import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { stringify } from 'csv-stringify';

export const DEFAULT_ROWS = 10_000;

const FIRST_NAMES = [
  'Zoë', 'Siobhán', 'Jürgen', 'João', 'Łucja', 'Renée', 'Mari', 'Ngozi', 'Åsa', 'Olivier', 'Amélie', 'Conor', 'Björn',
  'Inês', 'Fatima', 'Liam', 'Héloïse', 'Kenta', 'Chloé', 'Zdeněk', 'Søren', 'Ana', 'Margaux', 'Seán', 'Ayşe', 'Nuño',
];
const LAST_NAMES = [
  "O'Connor", 'Müller', 'São Pedro', 'Wiśniewska', "D'Angelo", 'Kähkönen', 'Okonkwo', 'Lindqvist', 'Lefèvre', 'Gonçalves',
  "O'Sullivan", 'Åkesson', 'Al-Sayed', "N'Diaye", 'Durand', 'Yamamoto', 'Núñez', 'Østergaard', 'Çelik', "Dell'Acqua",
];
const STREETS = ['Rue de la Paix', 'Königstraße', 'Grafton Street', 'Avenida Paulista', 'ul. Długa', 'Drottninggatan', 'Baker Street', "Church's Lane"];
const PLACES: readonly { city: string; postalCode: string; countryCode: string; state: string }[] = [
  { city: 'Paris', postalCode: '75002', countryCode: 'FRA', state: 'Île-de-France' },
  { city: 'München', postalCode: '80802', countryCode: 'DEU', state: 'Bayern' },
  { city: 'Dublin', postalCode: 'D02 X285', countryCode: 'IRL', state: '' },
  { city: 'São Paulo', postalCode: '01310-200', countryCode: 'BRA', state: 'SP' },
  { city: 'Gdańsk', postalCode: '80-827', countryCode: 'POL', state: '' },
  { city: 'Malmö', postalCode: '211 34', countryCode: 'SWE', state: '' },
  { city: 'London', postalCode: 'NW1 6XE', countryCode: 'GBR', state: '' },
  { city: 'Zürich', postalCode: '8001', countryCode: 'CHE', state: 'ZH' },
];

export const COLUMNS = [
  'FirstName', 'LastName', 'EmailAddress', 'AddressLine1', 'AddressLine2', 'City', 'StateProvince', 'PostalCode', 'CountryCode', 'MobileNumber',
] as const;

/** mulberry32: a small, fast, seeded generator (the same seed, the same file). */
export function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function hash(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

/** `Zoë O'Connor` → `zoe.oconnor`: ASCII for the address part of an email. */
const ascii = (text: string): string =>
  text.normalize('NFD').replace(/[\u0300-\u036f]/g, '').replace(/ł/gi, 'l').replace(/ø/gi, 'o').toLowerCase().replace(/[^a-z0-9]+/g, '');

function pick<T>(items: readonly T[], next: () => number): T {
  const item = items[Math.floor(next() * items.length)];
  if (item === undefined) throw new Error('pick from an empty list');
  return item;
}

/** The rows, one at a time, as cells in {@link COLUMNS} order. */
export function* customerRows(rows: number, uniqueTag?: string): Generator<string[]> {
  const next = random(hash(`${rows}:${uniqueTag ?? ''}`));
  for (let i = 1; i <= rows; i++) {
    const first = pick(FIRST_NAMES, next);
    const last = pick(LAST_NAMES, next);
    const place = pick(PLACES, next);
    const lastName = uniqueTag === undefined ? last : `${last}-${uniqueTag}`;
    const number = 1 + Math.floor(next() * 200);
    const mobile = next() < 0.25 ? '' : `+${10 + Math.floor(next() * 80)} ${String(Math.floor(next() * 1e9)).padStart(9, '0')}`;
    yield [
      first,
      lastName,
      `${ascii(first)}.${ascii(last)}.${i}@example.com`,
      `${number} ${pick(STREETS, next)}, Apt ${1 + Math.floor(next() * 40)}`,
      next() < 0.2 ? `Building ${String.fromCharCode(65 + Math.floor(next() * 6))}` : '',
      place.city,
      place.state,
      place.postalCode,
      place.countryCode,
      mobile,
    ];
  }
}

/** Writes `rows` customers to `out`, streamed; resolves when the file is complete. */
export async function writeCustomersCsv(out: string, rows: number, options: { uniqueTag?: string } = {}): Promise<void> {
  await pipeline(
    Readable.from(customerRows(rows, options.uniqueTag)),
    stringify({ header: true, columns: [...COLUMNS], record_delimiter: 'windows' }),
    createWriteStream(out),
  );
}

async function main(argv: string[]): Promise<void> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { 'unique-tag': { type: 'string' } },
  });
  const [out, rowsText = String(DEFAULT_ROWS)] = positionals;
  const rows = Number(rowsText);
  if (out === undefined || positionals.length > 2 || !Number.isSafeInteger(rows) || rows < 0) {
    throw new Error('usage: node dist/bench/make-customers.js OUT.csv [ROWS=10000] [--unique-tag TAG]');
  }
  const tag = values['unique-tag'];
  if (tag !== undefined && !/^[A-Za-z0-9]+$/.test(tag)) throw new Error('--unique-tag takes letters and digits only');
  await writeCustomersCsv(out, rows, { uniqueTag: tag });
  process.stdout.write(`wrote ${rows} customers to ${out}\n`);
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  });
}
