import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, SubsyncError, hasCode } from '../src/errors.js';

const ROOT = path.resolve(import.meta.dirname, '..');

/** Every .ts file under `dir` (relative to the repository), as [path, text]. */
function sources(dir: string): Array<[string, string]> {
  return readdirSync(path.join(ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => path.relative(ROOT, path.join(entry.parentPath, entry.name)))
    .sort()
    .map((file) => [file, readFileSync(path.join(ROOT, file), 'utf8')]);
}

const CODE = [...sources('src'), ...sources('jobs')];

/** `file:line: text` of every line of the product's code matching `pattern`, outside the files `except` allows. */
function linesMatching(pattern: RegExp, except: (file: string) => boolean = () => false): string[] {
  return CODE.flatMap(([file, text]) =>
    except(file)
      ? []
      : text.split('\n').flatMap((line, i) => (pattern.test(line) && !/^\s*(\*|\/\/)/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
  );
}

class SampleError extends SubsyncError {
  readonly code = 'FILE_CHANGED';
}

describe('SubsyncError', () => {
  it('carries its code and its class name, and keeps a cause', () => {
    const cause = new Error('underneath');
    const error = new SampleError('it changed', { cause });
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ code: 'FILE_CHANGED', name: 'SampleError', message: 'it changed', cause });
    expect(hasCode(error, 'FILE_CHANGED')).toBe(true);
    expect(hasCode(error, 'FILE_REJECTED', 'CSV_FORMAT')).toBe(false);
    // A code on anything but a subsync error is not a subsync code.
    expect(hasCode(Object.assign(new Error('x'), { code: 'FILE_CHANGED' }), 'FILE_CHANGED')).toBe(false);
  });
});

describe('the error codes', () => {
  it('are UPPER_SNAKE and each says when it is raised', () => {
    for (const [code, when] of Object.entries(ERROR_CODES)) {
      expect(code).toMatch(/^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$/);
      expect(when.length).toBeGreaterThan(15);
    }
  });

  it('are each raised somewhere: no code is declared and left unused', () => {
    // The declaring table and the exit-code table (`CODE: 'what'` lines) do not count.
    const elsewhere = CODE.filter(([file]) => file !== 'src/errors.ts')
      .map(([, text]) => text.replace(/^\s*[A-Z][A-Z0-9_]*: '[^']*',$/gm, ''))
      .join('\n');
    const unused = Object.keys(ERROR_CODES).filter((code) => !elsewhere.includes(`'${code}'`));
    expect(unused).toEqual([]);
  });
});

describe('the code', () => {
  it('declares every error class under SubsyncError: only the root and the sandbox (the fake service) extend Error', () => {
    expect(linesMatching(/\bextends Error\b/)).toEqual([
      expect.stringMatching(/^src\/errors\.ts:\d+: export abstract class SubsyncError extends Error \{$/),
      expect.stringMatching(/^src\/sandbox\/store\.ts:\d+: export class SandboxRefusal extends Error \{$/),
    ]);
  });

  it('never branches on the text of an error', () => {
    const onText = [
      /\.message\s*\.\s*(startsWith|endsWith|includes|match|search|indexOf)\s*\(/,
      /\.message\s*[!=]==\s*['"`]/,
      /\b(?:e|err|error|caught)\.name\s*[!=]==/,
      /String\((?:e|err|error)\)\s*\.\s*(startsWith|endsWith|includes|match)\s*\(/,
      /\.(test|exec)\(\s*[\w.]*\.message\b/,
    ];
    const found = onText.flatMap((pattern) => linesMatching(pattern, (file) => file.startsWith('src/sandbox/')));
    const byFile = (file: string): string[] => found.filter((line) => line.startsWith(`${file}:`));
    // Where a library says it only in words: Redis names a reply's kind by its first word (redisErrorKind), and
    // csv-parse tells the character it found only in its message (read once its code chose the case).
    const WORDS_ONLY = ['src/redis/redis.ts', 'src/csv/reader.ts'];
    expect(found.filter((line) => !WORDS_ONLY.some((file) => line.startsWith(`${file}:`)))).toEqual([]);
    for (const file of WORDS_ONLY) expect(byFile(file)).toHaveLength(1);
  });

  it('branches on HTTP statuses only where the API client classifies an answer', () => {
    const onStatus = [/\bstatus(?:Code)?\s*(===|!==|>=|<=|>|<)\s*\d{3}\b/, /\b\d{3}\s*(===|!==|>=|<=|>|<)\s*[\w.?]*status(?:Code)?\b/i];
    // The API client's mapping and the policy it reads, the sandbox (the fake service answering), and the range check of the sandbox's --echo-card-data-status flag.
    const allowed = (file: string): boolean => file.startsWith('src/api/') || file === 'src/policy.ts' || file.startsWith('src/sandbox/') || file === 'src/cli/options.ts';
    expect(onStatus.flatMap((pattern) => linesMatching(pattern, allowed))).toEqual([]);
  });
});
