/** `subsync dashboard [--port N] [--host H]`: the retry dashboard until SIGTERM/SIGINT. */
import type { Command } from 'commander';
import { isLoopback } from '../dashboard/auth.js';
import { withRuntime } from './context.js';
import { parseNonEmpty, parsePort } from './options.js';
import { waitForShutdownSignal } from './signals.js';

export interface DashboardFlags {
  port: number;
  host: string;
}

export function register(program: Command): void {
  program
    .command('dashboard')
    .description('serve the retry dashboard (imports, failed rows, exports, queue health, /metrics, bull-board at /queues) until SIGTERM/SIGINT')
    .option('--port <n>', 'port (0 = any free port)', parsePort, 8080)
    .option('--host <host>', 'address to listen on; 0.0.0.0 for every interface (then set SUBSYNC_DASHBOARD_TOKEN)', parseNonEmpty, '127.0.0.1')
    .action((flags: DashboardFlags) => runDashboard(flags));
}

export async function runDashboard(flags: DashboardFlags): Promise<void> {
  const signal = waitForShutdownSignal();
  await withRuntime(async (runtime) => {
    const token = runtime.config.dashboardToken;
    if (!token && !isLoopback(flags.host)) {
      runtime.logger.warn({ host: flags.host }, 'dashboard reachable beyond this machine without SUBSYNC_DASHBOARD_TOKEN: anyone who reaches it can read customer data and retry rows');
    }
    // Loaded on use, so other commands do not load the web stack.
    const { startDashboard } = await import('../dashboard/server.js');
    const dashboard = await startDashboard({ runtime, host: flags.host, port: flags.port, token });
    runtime.adopt(() => dashboard.close());
    runtime.logger.info({ url: dashboard.url, auth: token ? 'token' : 'none' }, 'dashboard started');
    process.stdout.write(`dashboard: ${dashboard.url}${token ? ' (token required)' : ''}\nSIGTERM or Ctrl-C stops it\n`);
    const received = await signal;
    runtime.logger.info({ signal: received }, 'dashboard stopping');
  });
}
