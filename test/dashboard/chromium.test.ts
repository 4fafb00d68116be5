import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { findChromium, underCi } from './chromium.js';

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

async function fakeBrowser(folder: string, name: string, mode = 0o755): Promise<string> {
  await mkdir(folder, { recursive: true });
  const file = path.join(folder, name);
  await writeFile(file, '#!/bin/sh\n');
  await chmod(file, mode);
  return file;
}

describe('findChromium', () => {
  it('takes CHROMIUM_PATH first, then chromium, chromium-browser or google-chrome in the folders given, and finds none in empty ones', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'subsync-chromium-'));
    dir = root;
    const a = path.join(root, 'a');
    const b = path.join(root, 'b');
    await mkdir(a);
    expect(findChromium({}, [a, b])).toBeUndefined();
    // Not executable: not a browser.
    await fakeBrowser(a, 'chromium', 0o644);
    expect(findChromium({}, [a, b])).toBeUndefined();
    const chrome = await fakeBrowser(b, 'google-chrome');
    expect(findChromium({}, [a, b])).toBe(chrome);
    const browser = await fakeBrowser(a, 'chromium-browser');
    expect(findChromium({}, [a, b])).toBe(browser);
    const chosen = await fakeBrowser(root, 'my-chromium');
    expect(findChromium({ CHROMIUM_PATH: chosen }, [a, b])).toBe(chosen);
    expect(() => findChromium({ CHROMIUM_PATH: path.join(root, 'missing') }, [a, b])).toThrow(/CHROMIUM_PATH=.*missing is not an executable file/);
  });

  it('knows CI when CI is true or 1', () => {
    expect(underCi({ CI: 'true' })).toBe(true);
    expect(underCi({ CI: '1' })).toBe(true);
    expect(underCi({ CI: 'false' })).toBe(false);
    expect(underCi({})).toBe(false);
  });
});
