import { loadConfig, type Config } from '../config.js';
import { createLogger } from '../log.js';
import { openRuntime, type Runtime } from '../runtime.js';

/**
 * Runs a command body with the configuration, a logger on stderr (stdout is
 * for the command's own output) and the runtime, closing the runtime after.
 * `check` may refuse the configuration before anything is opened or logged.
 * `sends`: the command sends rows (worker, start), so a Redis that persists
 * nothing is refused unless SUBSYNC_REDIS_ACCEPT_LOSS.
 */
export async function withRuntime<T>(
  body: (runtime: Runtime) => Promise<T>,
  overrides: Partial<Config> = {},
  check?: (config: Config) => void,
  open: { sends?: boolean } = {},
): Promise<T> {
  const config = { ...loadConfig(), ...overrides };
  check?.(config);
  const logger = createLogger({ level: config.logLevel, destination: process.stderr });
  for (const warning of config.warnings) logger.warn(warning);
  const runtime = await openRuntime(config, logger, open);
  try {
    return await body(runtime);
  } finally {
    await runtime.close();
  }
}
