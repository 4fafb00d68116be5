import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The folder holding subsync's package.json, found by walking up from this
 * module: `src/` when run from sources (tests), `dist/src/` or `dist/bundle/` when built.
 */
export function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(dir, 'package.json');
    if (existsSync(candidate) && /"name":\s*"subsync"/.test(readFileSync(candidate, 'utf8'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('cannot find the subsync package folder');
    dir = parent;
  }
}

/** The sample CSV files shipped with subsync. */
export const samplesDir = (): string => path.join(packageRoot(), 'samples');
