import { userInfo } from 'node:os';

/**
 * Who a command acts as, for the audit trail: SUBSYNC_ACTOR when set (a CI
 * job or a runbook names itself), else `cli:<the operating system's user>`.
 */
export function cliActor(config: { actor?: string }): string {
  if (config.actor !== undefined) return config.actor;
  let user = 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // A container's user may have no passwd entry: the actor is still a command.
  }
  return `cli:${user}`;
}
