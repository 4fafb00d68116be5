import { describe, expect, it } from 'vitest';
import { jsonProgress } from '../../src/cli/import.js';
import { progressText } from '../../src/cli/progress.js';
import { NO_SCHEDULE_FIELDS, type ImportStatus } from './statusFixture.js';

describe('an import\'s turn as a person and a script read it', () => {
  const base: ImportStatus = { ...NO_SCHEDULE_FIELDS, importId: 'abc', total: 5_000, settledRows: 120, rowsPerSecond: 4 };

  it('names the place, the priority when not normal, the share and the ETA at the rate it gets', () => {
    const waiting: ImportStatus = {
      ...base,
      schedule: { priority: 'high', place: 2, sharing: 3, weightShare: 0.5, share: 0.333, rowsPerSecond: 16, backlogRows: 4_000, releasedRows: 1_000, waiting: true, etaSeconds: 305 },
    };
    expect(progressText(waiting)).toBe('120/5,000 rows  place 2 of 3 sharing the budget, high priority, share 33%  16 rows/s  ETA 5m05s');
  });

  it('says nothing of a turn when the import has the budget to itself', () => {
    const alone: ImportStatus = { ...base, schedule: { priority: 'normal', place: 1, sharing: 1, weightShare: 1, share: 1, rowsPerSecond: 48, backlogRows: 0, releasedRows: 5_000, waiting: false, etaSeconds: 102 } };
    expect(progressText(alone)).toBe('120/5,000 rows  48 rows/s  ETA 1m42s');
  });

  it('--wait --json: a progress line with the schedule, not before the interval, never for a finished import', () => {
    const lines: string[] = [];
    const waiting: ImportStatus = { ...base, schedule: { priority: 'normal', place: 1, sharing: 2, weightShare: 0.5, share: undefined, rowsPerSecond: undefined, backlogRows: 10, releasedRows: 0, waiting: true, etaSeconds: undefined } };
    const emit = jsonProgress((line) => lines.push(line), 0);
    emit(waiting);
    emit({ ...waiting, finished: true });
    expect(lines.map((line) => JSON.parse(line) as unknown)).toEqual([
      { importId: 'abc', progress: { settledRows: 120, total: 5_000, rowsPerSecond: 4, schedule: { priority: 'normal', place: 1, sharing: 2, weightShare: 0.5, backlogRows: 10, releasedRows: 0, waiting: true } } },
    ]);
    const quiet: string[] = [];
    jsonProgress((line) => quiet.push(line), 60_000)(waiting);
    expect(quiet).toEqual([]);
  });
});
