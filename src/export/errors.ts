/**
 * The export's own errors, each with a stable code; the CLI maps them to exit
 * codes in src/cli/exitCodes.ts.
 */
import { SubsyncError } from '../errors.js';

/** `export --wait`: the export job failed for good (its runs are used up, or the failure is permanent). */
export class ExportFailedError extends SubsyncError {
  readonly code = 'EXPORT_FAILED';
  constructor(
    readonly exportId: string,
    reason: string,
  ) {
    super(`export ${exportId} failed: ${reason}`);
  }
}

/**
 * `export --wait`: the file was written, but the service kept changing and it
 * is not proven complete (its manifest says why): exit 3, like an import with
 * rows that did not succeed.
 */
export class ExportIncompleteError extends SubsyncError {
  readonly code = 'EXPORT_INCOMPLETE';
  constructor(
    readonly exportId: string,
    readonly manifest: string,
  ) {
    super(`export ${exportId} is not proven complete: see the warnings in ${manifest}`);
  }
}
