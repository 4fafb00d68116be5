import { z } from 'zod';
import { Text } from './common.js';

/** One priced item of a price plan (the service's interface). Amount: up to four decimal places. */
export const PricePlanItemSchema = z.object({
  ProductName: Text,
  PricePlanItemTypeCode: Text,
  Amount: z.number().refine((n) => Number.isFinite(n) && Math.abs(n * 1e4 - Math.round(n * 1e4)) < 1e-6, 'at most four decimal places'),
});
export type PricePlanItem = z.infer<typeof PricePlanItemSchema>;

export const PricePlanSchema = z.object({
  PricePlanCode: Text,
  CurrencyCode: Text,
  FreeTrialDuration: z.number().int(),
  FreeTrialType: Text,
  PricePlanItems: z.array(PricePlanItemSchema),
});
export type PricePlan = z.infer<typeof PricePlanSchema>;

/** Only the status value `Active` is given by the interface; others are not shown. */
export const ACTIVE_OFFER_STATUS = 'Active';

export const OfferSchema = z.object({
  OfferCode: Text,
  Name: Text,
  Description: Text,
  Status: Text,
  PricePlan: PricePlanSchema,
});
export type Offer = z.infer<typeof OfferSchema>;
