/** `subsync dashboard [--port N] [--host H]`: the retry dashboard until SIGTERM/SIGINT. */
import type { Command } from 'commander';
import { requireTokenOffLoopback } from '../dashboard/auth.js';
import type { Runtime } from '../runtime.js';
import { withRuntime } from './context.js';
import { parseNonEmpty, parsePort } from './options.js';
import { waitForShutdownSignal } from './signals.js';

export interface DashboardFlags {
  port: number;
  host: string;
}

/** Declares the dashboard's flags on `command` (`dashboard` and `start` take the same). */
export function addDashboardOptions(command: Command): Command {
  return command
    .option('--port <n>', 'dashboard port (0 = any free port)', parsePort, 8080)
    .option('--host <host>', 'dashboard address to listen on; 0.0.0.0 for every interface (needs SUBSYNC_DASHBOARD_TOKEN)', parseNonEmpty, '127.0.0.1');
}

export function register(program: Command): void {
  addDashboardOptions(
    program.command('dashboard').description('serve the retry dashboard (imports, failed rows, exports, queue health, /metrics, bull-board at /queues) until SIGTERM/SIGINT'),
  ).action((flags: DashboardFlags) => runDashboard(flags));
}

/** Starts the dashboard for `flags` on `runtime`, closed with the runtime (before its connections). */
export async function startDashboardFor(runtime: Runtime, flags: DashboardFlags): Promise<{ url: string; token: string | undefined }> {
  const token = runtime.config.dashboardToken;
  // Anyone who reaches it could read customer data and retry rows: refused, not warned about.
  requireTokenOffLoopback(flags.host, token, runtime.config.dashboardTokens);
  // Loaded on use, so other commands do not load the web stack.
  const { startDashboard } = await import('../dashboard/server.js');
  const dashboard = await startDashboard({ runtime, host: flags.host, port: flags.port, token, hosts: runtime.config.dashboardHosts });
  runtime.adopt(() => dashboard.close());
  runtime.logger.info({ url: dashboard.url, auth: token ? 'token' : 'none' }, 'dashboard started');
  return { url: dashboard.url, token };
}

export async function runDashboard(flags: DashboardFlags): Promise<void> {
  const signal = waitForShutdownSignal();
  await withRuntime(async (runtime) => {
    const { url, token } = await startDashboardFor(runtime, flags);
    process.stdout.write(`dashboard: ${url}${token ? ' (token required)' : ''}\nSIGTERM or Ctrl-C stops it\n`);
    const received = await signal;
    runtime.logger.info({ signal: received }, 'dashboard stopping');
  }, {}, (config) => requireTokenOffLoopback(flags.host, config.dashboardToken, config.dashboardTokens));
}
