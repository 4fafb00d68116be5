/**
 * The image cannot be built here (no Docker engine), so its Dockerfile is
 * read instead: its build stage must copy every file and folder that `npm ci`
 * (whose `prepare` runs `npm run build`) reads, and its runtime stage what
 * `bin/subsync.js` runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';

/** The sources of each `COPY` line (not `--from` another stage), per stage in order. */
function copiedByStage(dockerfile: string): string[][] {
  const stages: string[][] = [];
  for (const line of dockerfile.split('\n')) {
    if (/^FROM\s/i.test(line)) stages.push([]);
    const copy = /^COPY\s+(?!--from)(.+)$/i.exec(line);
    if (copy?.[1]) stages[stages.length - 1]?.push(...copy[1].trim().split(/\s+/).slice(0, -1));
  }
  return stages;
}

/** `tsc -p X`, `node scripts/y.mjs`: the files and folders a package script names. */
function namedByScript(script: string): string[] {
  return [...script.matchAll(/(?:-p\s+|node\s+)([\w./-]+)/g)].map((match) => (match[1] as string).split('/')[0] as string);
}

describe('Dockerfile', () => {
  const [build, runtime] = copiedByStage(readFileSync('Dockerfile', 'utf8'));
  const pkg = z.object({ scripts: z.record(z.string(), z.string()) }).parse(JSON.parse(readFileSync('package.json', 'utf8')));
  const tsconfig = z.object({ include: z.array(z.string()) }).parse(JSON.parse(readFileSync('tsconfig.build.json', 'utf8')));

  it('reads two stages', () => {
    expect(build).toBeDefined();
    expect(runtime).toBeDefined();
  });

  it('copies into its build stage everything the build reads', () => {
    const read = new Set(['package.json', 'package-lock.json', 'tsconfig.json', 'bin', ...tsconfig.include, ...namedByScript(pkg.scripts.build ?? '')]);
    expect(read).toContain('scripts');
    expect([...read].filter((name) => !build?.includes(name))).toEqual([]);
  });

  it('copies into its runtime stage what the launcher runs and the demo reads', () => {
    expect(readFileSync('bin/subsync.js', 'utf8')).toContain('../dist/bundle/cli.js');
    expect(runtime).toEqual(expect.arrayContaining(['bin', 'samples']));
    expect(readFileSync('Dockerfile', 'utf8')).toMatch(/^COPY --from=build \/app\/dist \.\/dist$/m);
  });
});
