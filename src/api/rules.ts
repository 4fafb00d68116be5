/**
 * Field rules shared by the CSV validation and the sandbox.
 * Pure functions: each returns true when the value passes.
 */
import { scrubSecrets } from '../secrets.js';

/** Card numbers: 12 to 19 digits with a valid Luhn check digit. */
export function isCardNumber(value: string): boolean {
  if (!/^\d{12,19}$/.test(value)) return false;
  let sum = 0;
  for (let i = 0; i < value.length; i++) {
    let digit = value.charCodeAt(value.length - 1 - i) - 48;
    if (i % 2 === 1) {
      digit *= 2;
      if (digit > 9) digit -= 9;
    }
    sum += digit;
  }
  return sum % 10 === 0;
}

/** The order of month and year in ExpirationDate is not shown by the interface: MMYY by default. */
export type ExpiryFormat = 'MMYY' | 'YYMM';

/** Four digits in the given order, a real month, not before the current month. */
export function isCurrentExpiry(value: string, format: ExpiryFormat = 'MMYY', now: Date = new Date()): boolean {
  if (!/^\d{4}$/.test(value)) return false;
  const month = Number(format === 'MMYY' ? value.slice(0, 2) : value.slice(2));
  const year = 2000 + Number(format === 'MMYY' ? value.slice(2) : value.slice(0, 2));
  if (month < 1 || month > 12) return false;
  const thisYear = now.getUTCFullYear();
  const thisMonth = now.getUTCMonth() + 1;
  return year > thisYear || (year === thisYear && month >= thisMonth);
}

/** Three or four digits. */
export const isCvc = (value: string): boolean => /^\d{3,4}$/.test(value);

/** Three letters (ISO 3166-1 alpha-3 shape). */
export const isCountryCode = (value: string): boolean => /^[A-Za-z]{3}$/.test(value);

/** A plausible address: something@domain.tld, no spaces. */
export const isEmailAddress = (value: string): boolean => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(value);

/** GUID text form, as PaymentMethodKey uses. */
export const isGuid = (value: string): boolean =>
  /^\{?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\}?$/.test(value);

/** Numeric text, as CustomerID. */
export const isNumericText = (value: string): boolean => /^\d+$/.test(value);

/** The last four digits, for results, errors, the dashboard and logs. */
export function maskCardNumber(value: string): string {
  const digits = value.replace(/\D/g, '');
  return digits.length <= 4 ? digits : `${'*'.repeat(Math.max(0, digits.length - 4))}${digits.slice(-4)}`;
}

/**
 * Masks anything shaped like a card number (12 or more digits, spaces, tabs,
 * dashes, dots or slashes between them) in free text: an API message that
 * echoes a request, an error reason, before it is stored or logged.
 * {@link scrubSecrets} with no row's secrets known.
 */
export function scrubCardNumbers(text: string): string {
  return scrubSecrets(text);
}

/** American Express: card numbers starting 34 or 37. Its security code has 4 digits; other brands' have 3. */
export const isAmericanExpress = (cardNumber: string): boolean => /^3[47]\d{13}$/.test(cardNumber);

/** The length of the security code of the card `cardNumber`, or undefined when the number is not a card number. */
export function cvcLengthFor(cardNumber: string): 3 | 4 | undefined {
  if (!isCardNumber(cardNumber)) return undefined;
  return isAmericanExpress(cardNumber) ? 4 : 3;
}
