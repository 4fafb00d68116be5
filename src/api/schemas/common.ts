import { z } from 'zod';

/**
 * Every successful response carries `Message`, a string holding the service's
 * success indicator (the service's interface). Its failure values are not
 * shown, so the schema only insists that it is a string.
 */
export const MessageSchema = z.string();

/** A text field of the wire format: blanks travel as empty strings, never omitted. */
export const Text = z.string();

/** Numeric text, as the service uses for CustomerID. */
export const NumericTextSchema = z.string().regex(/^\d+$/, 'numeric text');

/** The error body the sandbox answers with; a real service may answer anything (not shown). */
export const ErrorBodySchema = z.looseObject({ Message: z.string() });
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/** One line naming each problem of a failed parse: `Customer.EmailAddress: Invalid input; ...`. */
export function describeZodError(error: z.ZodError): string {
  return error.issues.map((issue) => `${issue.path.join('.') || '(body)'}: ${issue.message}`).join('; ');
}
