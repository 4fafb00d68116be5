import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const bin = path.join(root, 'bin', 'subsync.js');

/** A spawned `subsync`, with its output so far. */
export interface Run {
  child: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code (or signal) once the process has ended. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Fails a CLI test file at once when the CLI is not built (`npm test` builds it first); for `beforeAll`. */
export function requireBuiltCli(): void {
  if (!existsSync(path.join(root, 'dist', 'bundle', 'cli.js'))) {
    throw new Error('dist/bundle/cli.js is missing: run `npm run build` first (`npm test` does)');
  }
}

export const running = new Set<ChildProcessWithoutNullStreams>();

export function subsync(args: string[], env: NodeJS.ProcessEnv = {}): Run {
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
export function waitForOutput(run: Run, pattern: RegExp): Promise<RegExpMatchArray> {
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


/** Kills every `subsync` a test left running (call from afterEach). */
export async function killAll(): Promise<void> {
  for (const child of running) {
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
}
