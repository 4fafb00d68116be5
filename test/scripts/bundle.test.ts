/**
 * The bundle `bin/subsync.js` runs: the files every command loads (the
 * entry and what it imports statically) are ASCII, as V8 then holds their
 * source at one byte a character; licence comments are kept beside them.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { requireBuiltCli, root } from '../support/cli.js';

const bundle = path.join(root, 'dist', 'bundle');

/** The entry and the chunks it imports statically, transitively (not the `import()`ed commands). */
function loadedAtStart(entry: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const code = readFileSync(path.join(bundle, file), 'utf8');
    for (const match of code.matchAll(/(?:^|[;}\s])import\s*(?:[\w${},*\s]+from\s*)?["']\.\/([\w.-]+\.js)["']/g)) visit(match[1] as string);
  };
  visit(entry);
  return [...seen];
}

describe('the bundle', () => {
  beforeAll(requireBuiltCli);

  it('loads at start only files of ASCII, with at least one chunk beside the entry', () => {
    const files = loadedAtStart('cli.js');
    expect(files.length).toBeGreaterThan(1);
    const notAscii = files.filter((file) => readFileSync(path.join(bundle, file)).some((byte) => byte > 0x7f));
    expect(notAscii).toEqual([]);
  });

  it('keeps the licence comments it took out of the code in files beside it', () => {
    const legal = loadedAtStart('cli.js').filter((file) => existsSync(path.join(bundle, `${file}.LEGAL.txt`)));
    expect(legal).not.toEqual([]);
  });
});
