/**
 * CSV files about the sandbox's population (src/sandbox/population.ts), for
 * tests and benchmarks of finding customers: people the service holds
 * (population indexes below its size) and new ones (indexes above it).
 */
import { writeFile } from 'node:fs/promises';
import { stringify } from 'csv-stringify/sync';
import { personAt } from '../src/sandbox/population.js';

/** The columns of these files: who, and where (City is what an update changes). */
export const POPULATION_FILE_COLUMNS = ['FirstName', 'LastName', 'EmailAddress', 'City', 'MobileNumber'] as const;

export interface PopulationFile {
  /** The population's seed (the sandbox's `seedRandom`, default 1). */
  seed?: number;
  /** Population indexes of the rows, in file order. */
  people: readonly number[];
  /** Rows whose City is changed (so an update of an existing customer sends a PUT); default every row. */
  changed?: (index: number) => boolean;
  /** Columns in another order (a list exported again by another tool): the same rows, other bytes. */
  reversed?: boolean;
}

/** Writes the file and returns its path. */
export async function writePopulationFile(path: string, file: PopulationFile): Promise<string> {
  const columns = file.reversed ? [...POPULATION_FILE_COLUMNS].reverse() : [...POPULATION_FILE_COLUMNS];
  const rows = file.people.map((index) => {
    const person = personAt(file.seed ?? 1, index);
    const changed = file.changed?.(index) ?? true;
    const cells: Record<string, string> = { ...person, City: changed ? `${person.City} (moved)` : person.City, MobileNumber: person.MobileNumber ?? '' };
    return columns.map((column) => cells[column] ?? '');
  });
  await writeFile(path, stringify([columns, ...rows]));
  return path;
}

/** `count` indexes spread over [from, to), deterministic. */
export function spread(from: number, to: number, count: number): number[] {
  const step = (to - from) / count;
  return Array.from({ length: count }, (_, i) => from + Math.floor(i * step));
}
