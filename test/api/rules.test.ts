import { describe, expect, it } from 'vitest';
import {
  cvcLengthFor,
  isAmericanExpress,
  isCardNumber,
  isCountryCode,
  isCurrentExpiry,
  isCvc,
  isEmailAddress,
  isGuid,
  isNumericText,
  maskCardNumber,
} from '../../src/api/rules.js';

describe('field rules', () => {
  it('checks card numbers with Luhn', () => {
    expect(isCardNumber('4111111111111111')).toBe(true);
    expect(isCardNumber('5555555555554444')).toBe(true);
    expect(isCardNumber('378282246310005')).toBe(true);
    expect(isCardNumber('4111111111111112')).toBe(false);
    expect(isCardNumber('4111 1111 1111 1111')).toBe(false);
    expect(isCardNumber('')).toBe(false);
    expect(isCardNumber('12345678901')).toBe(false);
  });

  it('checks expiry in MMYY or YYMM, not before this month', () => {
    const now = new Date('2026-11-22T00:00:00Z');
    expect(isCurrentExpiry('1126', 'MMYY', now)).toBe(true);
    expect(isCurrentExpiry('1026', 'MMYY', now)).toBe(false);
    expect(isCurrentExpiry('0127', 'MMYY', now)).toBe(true);
    expect(isCurrentExpiry('1326', 'MMYY', now)).toBe(false);
    expect(isCurrentExpiry('0026', 'MMYY', now)).toBe(false);
    expect(isCurrentExpiry('2701', 'YYMM', now)).toBe(true);
    expect(isCurrentExpiry('2610', 'YYMM', now)).toBe(false);
    expect(isCurrentExpiry('126', 'MMYY', now)).toBe(false);
  });

  it('checks the small formats', () => {
    expect([isCvc('123'), isCvc('1234'), isCvc('12'), isCvc('12a')]).toEqual([true, true, false, false]);
    expect([isCountryCode('FRA'), isCountryCode('fr'), isCountryCode('FR1')]).toEqual([true, false, false]);
    expect([isEmailAddress('a.b@example.co.uk'), isEmailAddress('a@b'), isEmailAddress('a b@c.de')]).toEqual([true, false, false]);
    expect([isGuid('6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01'), isGuid('{6F1C2B9E-3D4A-4C5B-8E7F-0A1B2C3D4E01}'), isGuid('6f1c2b9e')]).toEqual([true, true, false]);
    expect([isNumericText('100001'), isNumericText('1e3'), isNumericText('')]).toEqual([true, false, false]);
  });

  it('masks a card number to its last four digits', () => {
    expect(maskCardNumber('4111111111111111')).toBe('************1111');
    expect(maskCardNumber('123')).toBe('123');
    expect(maskCardNumber('4111111111111111')).not.toContain('41111111');
  });
});

describe('security code length by brand', () => {
  it('4 digits for American Express (34, 37), 3 for the others, none for a number that is not a card', () => {
    expect(isAmericanExpress('378282246310005')).toBe(true);
    expect(cvcLengthFor('378282246310005')).toBe(4);
    expect(cvcLengthFor('341111111111111')).toBe(4);
    expect(cvcLengthFor('4111111111111111')).toBe(3);
    expect(cvcLengthFor('5555555555554444')).toBe(3);
    expect(cvcLengthFor('4111111111111112')).toBeUndefined();
  });
});
