import { describe, expect, it } from 'vitest';
import { SIGNUP_CUSTOMER_FIELDS } from '../../src/api/schemas/index.js';
import { isCountryCode, isEmailAddress } from '../../src/api/rules.js';
import {
  COMMON_SURNAMES,
  FIRST_NAMES,
  MID_SURNAMES,
  POPULATION_CSV_HEADER,
  RARE_SURNAMES,
  RARE_SURNAME_COUNT,
  personAt,
  population,
  populationCsvRows,
} from '../../src/sandbox/population.js';

const SAMPLE = 200_000;

/** How many of the first `count` people (seed 1) have each surname / first name. */
function tally(count: number): { surnames: Map<string, number>; firstNames: Map<string, number> } {
  const surnames = new Map<string, number>();
  const firstNames = new Map<string, number>();
  for (const person of population(1, 0, count)) {
    surnames.set(person.LastName, (surnames.get(person.LastName) ?? 0) + 1);
    firstNames.set(person.FirstName, (firstNames.get(person.FirstName) ?? 0) + 1);
  }
  return { surnames, firstNames };
}

describe('population', () => {
  it('gives the same person for the same seed and index, whatever was drawn before', () => {
    const forward = [...population(7, 1000, 1050)];
    const backward = Array.from({ length: 50 }, (_, i) => personAt(7, 1049 - i)).reverse();
    expect(backward).toEqual(forward);
    expect(personAt(7, 1000)).toEqual(forward[0]);
    // Another seed, another population.
    const other = [...population(8, 1000, 1050)];
    expect(other.filter((p, i) => p.EmailAddress === forward[i]?.EmailAddress).length).toBeLessThan(5);
  });

  it('holds every customer field, with valid ASCII email addresses unique per index', () => {
    const emails = new Set<string>();
    let withMobile = 0;
    let withCompany = 0;
    let withMiddleName = 0;
    for (const person of population(1, 0, 20_000)) {
      expect(Object.keys(person).sort()).toEqual([...SIGNUP_CUSTOMER_FIELDS].sort());
      expect(person.EmailAddress).toMatch(/^[\x21-\x7e]+$/);
      expect(isEmailAddress(person.EmailAddress), person.EmailAddress).toBe(true);
      expect(person.CountryCode === '' || isCountryCode(person.CountryCode)).toBe(true);
      expect(person.FirstName.trim()).not.toBe('');
      expect(person.LastName.trim()).not.toBe('');
      emails.add(person.EmailAddress.toLowerCase());
      if (person.MobileNumber !== null) withMobile++;
      if (person.Company !== '') withCompany++;
      if (person.MiddleName !== '') withMiddleName++;
    }
    expect(emails.size).toBe(20_000);
    // "Existing" (below N) and "new" (from N on) people never share an address.
    expect(emails.has(personAt(1, 20_000).EmailAddress.toLowerCase())).toBe(false);
    for (const share of [withMobile, withCompany, withMiddleName]) {
      expect(share).toBeGreaterThan(1_000);
      expect(share).toBeLessThan(19_000);
    }
  });

  it('has name tables without repeats, with the names searches trip over', () => {
    const allSurnames = [...COMMON_SURNAMES, ...MID_SURNAMES, ...RARE_SURNAMES].map((name) => name.toLowerCase());
    expect(new Set(allSurnames).size).toBe(allSurnames.length);
    expect(RARE_SURNAMES).toHaveLength(RARE_SURNAME_COUNT);
    expect(new Set(FIRST_NAMES).size).toBe(FIRST_NAMES.length);
    expect(FIRST_NAMES.length).toBeGreaterThan(200);
    expect(FIRST_NAMES).toEqual(expect.arrayContaining(['Kathleen', 'Colleen', 'Ashlee', 'Lee', 'Leela', 'Zoë', 'José']));
    expect(COMMON_SURNAMES.slice(0, 1)).toEqual(['Smith']);
    expect(COMMON_SURNAMES).toEqual(expect.arrayContaining(['Johnson', 'Lee', 'Nguyen', 'Kim', 'Garcia', 'Müller']));
  });

  it(`skews names like a real customer base (${SAMPLE} people)`, () => {
    const { surnames, firstNames } = tally(SAMPLE);
    const share = (names: readonly string[]): number => names.reduce((sum, name) => sum + (surnames.get(name) ?? 0), 0) / SAMPLE;

    const [top] = [...surnames.entries()].sort((a, b) => b[1] - a[1]);
    expect(top?.[0]).toBe('Smith');
    expect((surnames.get('Smith') ?? 0) / SAMPLE).toBeGreaterThan(0.007);
    expect((surnames.get('Smith') ?? 0) / SAMPLE).toBeLessThan(0.015);
    expect(share(COMMON_SURNAMES)).toBeGreaterThan(0.2);
    expect(share(COMMON_SURNAMES)).toBeLessThan(0.3);
    expect(share(RARE_SURNAMES)).toBeGreaterThan(0.4);

    // The long tail: thousands of distinct surnames, each shared by a few.
    const rareCounts = RARE_SURNAMES.map((name) => surnames.get(name) ?? 0).filter((n) => n > 0).sort((a, b) => a - b);
    expect(rareCounts.length).toBeGreaterThan(20_000);
    expect(rareCounts[Math.floor(rareCounts.length / 2)]).toBeLessThan(10);
    expect(rareCounts[rareCounts.length - 1]).toBeLessThan(100);

    // First names are skewed too, and the "lee" names are there.
    const firstCounts = [...firstNames.values()].sort((a, b) => b - a);
    expect((firstCounts[0] ?? 0) / SAMPLE).toBeGreaterThan(0.015);
    expect((firstCounts[firstCounts.length - 1] ?? 0) / SAMPLE).toBeLessThan(0.002);
    for (const name of ['Kathleen', 'Colleen', 'Ashlee', 'Lee', 'Leela', 'Zoë', 'José']) expect(firstNames.get(name) ?? 0, name).toBeGreaterThan(50);
    expect(surnames.get('Müller') ?? 0).toBeGreaterThan(500);
  });

  it('writes a slice as CSV records under the customer field headers', () => {
    const rows = [...populationCsvRows(3, 10, 13)];
    expect(POPULATION_CSV_HEADER).toContain('EmailAddress');
    expect(POPULATION_CSV_HEADER).not.toContain('Password');
    expect(rows).toHaveLength(3);
    const person = personAt(3, 11);
    const row = rows[1] ?? [];
    expect(row).toHaveLength(POPULATION_CSV_HEADER.length);
    expect(row[POPULATION_CSV_HEADER.indexOf('EmailAddress')]).toBe(person.EmailAddress);
    expect(row[POPULATION_CSV_HEADER.indexOf('MobileNumber')]).toBe(person.MobileNumber ?? '');
  });
});
