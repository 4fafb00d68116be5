import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GetOfferResponseSchema } from '../src/api/schemas/index.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = path.join(root, 'bin', 'subsync.js');

/** A spawned `subsync`, with its output so far. */
interface Run {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code (or signal) once the process has ended. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const running = new Set<ChildProcessWithoutNullStreams>();

function subsync(args: string[], env: NodeJS.ProcessEnv = {}): Run {
  const child = spawn(process.execPath, [bin, ...args], {
    cwd: root,
    // A clean subsync environment: only what the test sets.
    env: { PATH: process.env.PATH, ...env },
  });
  running.add(child);
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      resolve({ code, signal });
    });
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** Resolves with the first match of `pattern` in the process's stdout; rejects if it exits first. */
function waitForOutput(run: Run, pattern: RegExp): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = (): void => {
      const match = run.stdout().match(pattern);
      if (match) {
        cleanup();
        resolve(match);
      }
    };
    const onExit = (): void => {
      cleanup();
      reject(new Error(`subsync exited before printing ${pattern}\nstdout:\n${run.stdout()}\nstderr:\n${run.stderr()}`));
    };
    const cleanup = (): void => {
      run.child.stdout.off('data', check);
      run.child.off('exit', onExit);
    };
    run.child.stdout.on('data', check);
    run.child.once('exit', onExit);
    check();
  });
}

beforeAll(() => {
  if (!existsSync(path.join(root, 'dist', 'src', 'cli.js'))) {
    throw new Error('dist/src/cli.js is missing: run `npm run build` first (`npm test` does)');
  }
});

afterEach(async () => {
  // A test that failed half-way must not leave a server running.
  for (const child of running) {
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
});

describe('subsync --help', () => {
  it('lists the commands and the environment variables', async () => {
    const run = subsync(['--help']);
    const { code } = await run.exited;
    expect(code).toBe(0);
    const help = run.stdout();
    expect(help).toMatch(/Usage: subsync/);
    expect(help).toMatch(/^\s+sandbox\b/m);
    expect(help).toMatch(/^\s+demo\b/m);
    expect(help).toContain('SUBSYNC_API_URL');
    expect(help).toContain('REDIS_URL');
    expect(help).toContain('redis://127.0.0.1:6379');
  });

  it('prints the version from package.json', async () => {
    const run = subsync(['--version']);
    expect((await run.exited).code).toBe(0);
    expect(run.stdout().trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});

describe('exit codes', () => {
  it('exits 64 naming the flag for a bad flag value', async () => {
    const run = subsync(['sandbox', '--error-rate', '2']);
    expect((await run.exited).code).toBe(64);
    expect(run.stderr()).toContain('--error-rate');
  });

  it('exits 78 with every bad variable for an invalid environment, hiding the card key', async () => {
    const run = subsync(['sandbox', '--port', '0'], { SUBSYNC_RATE: 'abc', SUBSYNC_CARD_KEY: 'not-a-key' });
    expect((await run.exited).code).toBe(78);
    expect(run.stderr()).toContain('SUBSYNC_RATE="abc": expected a positive number of requests per second');
    expect(run.stderr()).toContain('SUBSYNC_CARD_KEY=(hidden)');
    expect(run.stderr()).not.toContain('not-a-key');
  });
});

describe('subsync sandbox', () => {
  it('listens on a free port, answers HTTP, and exits 0 on SIGTERM', async () => {
    const run = subsync(['sandbox', '--port', '0', '--latency', '5']);
    const [, url] = await waitForOutput(run, /listening on (http:\/\/\S+)/);
    expect(url).toBeDefined();
    await waitForOutput(run, /faults: latency 5 ms/);

    const unknown = await fetch(`${url}/json/offers/NO-SUCH-OFFER`);
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ Message: 'Offer NO-SUCH-OFFER was not found' });
    const offer = await fetch(`${url}/json/offers/STREAM-PLUS`);
    expect(GetOfferResponseSchema.parse(await offer.json()).Offer.Status).toBe('Active');

    run.child.kill('SIGTERM');
    const { code, signal } = await run.exited;
    expect({ code, signal }).toEqual({ code: 0, signal: null });
  });
});
