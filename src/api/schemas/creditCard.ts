import { z } from 'zod';
import { Text } from './common.js';

/** Credit card fields shared by sign-up and payment-method update (the service's interface). */
const cardFields = {
  AccountNumber: Text,
  CVCode: Text,
  ExpirationDate: Text,
  FirstName: Text,
  LastName: Text,
  AddressLine1: Text,
  AddressLine2: Text,
  City: Text,
  StateProvince: Text,
  PostalCode: Text,
  CountryCode: Text,
  IPAddress: Text,
};

/** The sign-up member CreditCardInfo: 2.2 without PaymentMethodKey. */
export const CreditCardInfoSchema = z.strictObject(cardFields);
export type CreditCardInfo = z.infer<typeof CreditCardInfoSchema>;

/** The payment-method update member CreditCard: 2.2 including PaymentMethodKey. */
export const CreditCardSchema = z.strictObject({ ...cardFields, PaymentMethodKey: Text });
export type CreditCard = z.infer<typeof CreditCardSchema>;

/** Card field names in interface order (without PaymentMethodKey). */
export const CREDIT_CARD_FIELDS = Object.keys(CreditCardInfoSchema.shape) as ReadonlyArray<keyof CreditCardInfo>;

/** The fields that are payment-card data: never logged, never in plaintext at rest. */
export const CARD_SECRET_FIELDS = ['AccountNumber', 'CVCode'] as const;
