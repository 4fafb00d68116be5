/**
 * Parsers for command-line flag values. Each throws commander's
 * InvalidArgumentError, which commander reports naming the flag
 * (`option '--error-rate <p>' argument '2' is invalid. expected ...`) and which
 * exits with EXIT_CODES.usage.
 */
import { InvalidArgumentError } from 'commander';

function wholeNumber(value: string, expected: string): number {
  const n = /^\d+$/.test(value.trim()) ? Number(value.trim()) : Number.NaN;
  if (!Number.isSafeInteger(n)) throw new InvalidArgumentError(`expected ${expected}`);
  return n;
}

/** A TCP port, 0..65535; 0 lets the system pick a free one. */
export function parsePort(value: string): number {
  const port = wholeNumber(value, 'a port number from 0 to 65535 (0 = any free port)');
  if (port > 65_535) throw new InvalidArgumentError('expected a port number from 0 to 65535 (0 = any free port)');
  return port;
}

/** A whole number, 0 or more. */
export function parseNonNegativeInt(value: string): number {
  return wholeNumber(value, 'a whole number, 0 or more');
}

/** A probability, a number from 0 to 1. */
export function parseProbability(value: string): number {
  const text = value.trim();
  const p = text === '' ? Number.NaN : Number(text);
  if (!(p >= 0 && p <= 1)) throw new InvalidArgumentError('expected a probability, a number from 0 to 1');
  return p;
}

/** An HTTP error status, 400..599. */
export function parseErrorStatus(value: string): number {
  const status = wholeNumber(value, 'an HTTP error status from 400 to 599');
  if (status < 400 || status > 599) throw new InvalidArgumentError('expected an HTTP error status from 400 to 599');
  return status;
}

/** A non-empty text. */
export function parseNonEmpty(value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError('expected a non-empty value');
  return value;
}
