/**
 * Which Chromium the browser test drives: an installed one (never a
 * downloaded browser). CHROMIUM_PATH first, then the usual places of
 * Debian's and Ubuntu's packages and Google Chrome, then the same names on
 * PATH.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';

export const CHROMIUM_NAMES = ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'] as const;

/** How to get one, for the skip message and the CI failure. */
export const CHROMIUM_HINT = 'no Chromium found (/usr/bin/chromium, chromium-browser, google-chrome, or CHROMIUM_PATH); install one with `apt-get install chromium`';

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * The Chromium to launch, or undefined when none is installed.
 *
 * @throws Error when CHROMIUM_PATH is set but names no executable: asked for, it must be there.
 */
export function findChromium(env: NodeJS.ProcessEnv, dirs: readonly string[] = ['/usr/bin', ...(env.PATH ?? '').split(path.delimiter).filter((dir) => dir !== '')]): string | undefined {
  const chosen = env.CHROMIUM_PATH;
  if (chosen !== undefined && chosen !== '') {
    if (!executable(chosen)) throw new Error(`CHROMIUM_PATH=${chosen} is not an executable file`);
    return chosen;
  }
  for (const dir of dirs) for (const name of CHROMIUM_NAMES) if (executable(path.join(dir, name))) return path.join(dir, name);
  return undefined;
}

/** Under CI the browser test must run: a missing browser fails it there instead of skipping. */
export const underCi = (env: NodeJS.ProcessEnv): boolean => env.CI === 'true' || env.CI === '1';

/** The Chromium of this machine, if any. */
export const CHROMIUM = findChromium(process.env);

/** Whether a browser test runs here (a browser is installed, or CI demands it); a skip says why, naming the test. */
export function browserTestRuns(what: string): boolean {
  const run = CHROMIUM !== undefined || underCi(process.env);
  if (!run) process.stderr.write(`skipping ${what}: ${CHROMIUM_HINT}\n`);
  return run;
}

/** Launches the installed Chromium headless, with the flags a container needs, once the screenshots' folder exists. */
export async function launchChromium(screenshots: string): Promise<Browser> {
  if (CHROMIUM === undefined) throw new Error(`CI=true and ${CHROMIUM_HINT}`);
  await mkdir(screenshots, { recursive: true });
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
}

/**
 * The browser of a describe's tests: launched before the first (the
 * screenshots' folder made) and closed after the last. Call it inside the
 * describe; the getter throws if a test runs before the launch.
 */
export function suiteBrowser(screenshots: string): () => Browser {
  let browser: Browser | undefined;
  beforeAll(async () => {
    browser = await launchChromium(screenshots);
  });
  afterAll(async () => {
    await browser?.close();
  });
  return () => {
    if (browser === undefined) throw new Error('the browser is not launched yet');
    return browser;
  };
}

/**
 * Reloads the page. A page with live progress reloads itself when an
 * import's state changes, and a reload of the test's own that crosses it is
 * aborted (net::ERR_ABORTED): it is then made again, up to three times.
 */
export async function reloadPage(page: Page): Promise<void> {
  for (let tries = 1; ; tries++) {
    try {
      await page.reload();
      return;
    } catch (error) {
      if (tries >= 3) throw error;
    }
  }
}
