import { z } from 'zod';
import { Text } from './common.js';

/** One provisioning value of a subscription item (the service's interface). */
export const ProductFieldSchema = z.strictObject({ ProductFieldCode: Text, Value: Text });
export type ProductField = z.infer<typeof ProductFieldSchema>;

/** Product provisioning detail of a subscription. */
export const SubscriptionItemSchema = z.strictObject({
  ProductCode: Text,
  SubscriptionItemID: Text,
  Fields: z.array(ProductFieldSchema),
});
export type SubscriptionItem = z.infer<typeof SubscriptionItemSchema>;

/**
 * The sign-up member Subscription. SubscriptionItems is optional: it is given
 * only when the offer requires provisioning information.
 */
export const SubscriptionSchema = z.strictObject({
  OfferCode: Text,
  PromotionCode: Text,
  ResellerID: Text,
  SubscriptionID: Text,
  SubscriptionItems: z.array(SubscriptionItemSchema).optional(),
});
export type Subscription = z.infer<typeof SubscriptionSchema>;
