/**
 * The dependency check of `npm test` (scripts/layers.mjs) on the project
 * itself, and on a small tree that breaks each of its two rules.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const script = path.resolve('scripts/layers.mjs');

async function check(cwd: string): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [script], { cwd });
    return { code: 0, out: stdout + stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, out: failed.stdout + failed.stderr };
  }
}

describe('dependency check', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function tree(files: Record<string, string>): Promise<string> {
    dir = await mkdtemp(path.join(tmpdir(), 'subsync-layers-'));
    for (const [file, text] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
      await writeFile(path.join(dir, file), text);
    }
    return dir;
  }

  it('passes on the project', async () => {
    const { code, out } = await check(process.cwd());
    expect(out).toContain('no cycle, every import downward');
    expect(code).toBe(0);
  });

  it('refuses an import from a layer above', async () => {
    const cwd = await tree({
      'src/queue/queues.ts': "import { run } from '../workers/rowWorker.js';\nexport const q = run;\n",
      'src/workers/rowWorker.ts': 'export const run = 1;\n',
    });
    const { code, out } = await check(cwd);
    expect(code).toBe(1);
    expect(out).toContain('src/queue/queues.ts imports src/workers/rowWorker.ts: "queue" may not import from "workers", a layer above it');
  });

  it('refuses a cycle, even within one layer', async () => {
    const cwd = await tree({
      'src/store/a.ts': "import { b } from './b.js';\nexport const a = () => b;\n",
      'src/store/b.ts': "import { a } from './a.js';\nexport const b = () => a;\n",
    });
    const { code, out } = await check(cwd);
    expect(code).toBe(1);
    expect(out).toMatch(/import cycle: src\/store\/[ab]\.ts -> src\/store\/[ab]\.ts/);
  });

  it('refuses a module that has no layer', async () => {
    const cwd = await tree({ 'src/newthing/x.ts': 'export const x = 1;\n' });
    const { code, out } = await check(cwd);
    expect(code).toBe(1);
    expect(out).toContain('module "newthing" has no layer');
  });
});
