import { z } from 'zod';
import { MessageSchema, NumericTextSchema, Text } from './common.js';
import { CustomerInputSchema, CustomerSchema, SignupCustomerSchema } from './customer.js';
import { CreditCardInfoSchema, CreditCardSchema } from './creditCard.js';
import { SubscriptionSchema } from './subscription.js';
import { OfferSchema } from './offer.js';

// Request and response bodies of the seven endpoints (the service's interface).
// Responses are parsed loosely (an extra member from the service is tolerated);
// requests strictly (subsync never sends a member the interface does not show).

/** Query of 4.1; all three parameters are required, take at most 100. */
export const SEARCH_TAKE_MAX = 100;
export const SearchQuerySchema = z.strictObject({
  contains: z.string(),
  skip: z.number().int().min(0),
  take: z.number().int().min(1).max(SEARCH_TAKE_MAX),
});
export type SearchQuery = z.infer<typeof SearchQuerySchema>;

export const SearchCustomersResponseSchema = z.object({
  Message: MessageSchema,
  Customers: z.array(CustomerSchema),
  TotalItemCount: z.number().int().min(0),
});
export type SearchCustomersResponse = z.infer<typeof SearchCustomersResponseSchema>;

export const GetCustomerResponseSchema = z.object({ Message: MessageSchema, Customer: CustomerSchema });
export type GetCustomerResponse = z.infer<typeof GetCustomerResponseSchema>;

export const CreateCustomerRequestSchema = CustomerInputSchema;
export type CreateCustomerRequest = z.infer<typeof CreateCustomerRequestSchema>;
export const CreateCustomerResponseSchema = z.object({ Message: MessageSchema, CustomerID: NumericTextSchema });
export type CreateCustomerResponse = z.infer<typeof CreateCustomerResponseSchema>;

export const UpdateCustomerRequestSchema = CustomerInputSchema;
export type UpdateCustomerRequest = z.infer<typeof UpdateCustomerRequestSchema>;
export const UpdateCustomerResponseSchema = z.object({ Message: MessageSchema, CustomerID: NumericTextSchema });
export type UpdateCustomerResponse = z.infer<typeof UpdateCustomerResponseSchema>;

export const GetOfferResponseSchema = z.object({ Message: MessageSchema, Offer: OfferSchema });
export type GetOfferResponse = z.infer<typeof GetOfferResponseSchema>;

export const SignupRequestSchema = z.strictObject({
  Customer: SignupCustomerSchema,
  CreditCardInfo: CreditCardInfoSchema,
  Subscription: SubscriptionSchema,
});
export type SignupRequest = z.infer<typeof SignupRequestSchema>;
export const SignupResponseSchema = z.object({
  Message: MessageSchema,
  CustomerID: NumericTextSchema,
  SubscriptionID: Text,
});
export type SignupResponse = z.infer<typeof SignupResponseSchema>;

export const UpdatePaymentMethodRequestSchema = z.strictObject({ CreditCard: CreditCardSchema });
export type UpdatePaymentMethodRequest = z.infer<typeof UpdatePaymentMethodRequestSchema>;
export const UpdatePaymentMethodResponseSchema = z.object({ Message: MessageSchema, PaymentMethodKey: Text });
export type UpdatePaymentMethodResponse = z.infer<typeof UpdatePaymentMethodResponseSchema>;
