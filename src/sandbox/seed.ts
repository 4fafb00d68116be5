import type { Customer, Offer } from '../api/schemas/index.js';

/** Provisioning the sandbox demands of an offer: one item with these product field codes. */
export interface ProvisioningRequirement {
  ProductCode: string;
  FieldCodes: readonly string[];
}

export interface SeedOffer {
  offer: Offer;
  /** Not part of the interface's Offer: which provisioning this offer's products require. */
  provisioning?: ProvisioningRequirement;
}

/**
 * Offers every sandbox starts with: one Active offer with a several-item price
 * plan and a free trial, one Active offer whose product requires provisioning
 * fields, one Active annual offer, and one inactive offer.
 */
export const SEED_OFFERS: readonly SeedOffer[] = [
  {
    offer: {
      OfferCode: 'STREAM-PLUS',
      Name: 'Stream Plus',
      Description: 'HD streaming on four screens, with a 14-day free trial.',
      Status: 'Active',
      PricePlan: {
        PricePlanCode: 'STREAM-PLUS-M',
        CurrencyCode: 'EUR',
        FreeTrialDuration: 14,
        FreeTrialType: 'Days',
        PricePlanItems: [
          { ProductName: 'Stream Plus subscription', PricePlanItemTypeCode: 'REC', Amount: 12.99 },
          { ProductName: 'Extra screen', PricePlanItemTypeCode: 'REC', Amount: 2.5 },
          { ProductName: 'Activation', PricePlanItemTypeCode: 'OTC', Amount: 4.9999 },
        ],
      },
    },
  },
  {
    offer: {
      OfferCode: 'FIBER-500',
      Name: 'Fiber 500',
      Description: 'Home fibre at 500 Mbit/s; the router must be provisioned.',
      Status: 'Active',
      PricePlan: {
        PricePlanCode: 'FIBER-500-M',
        CurrencyCode: 'EUR',
        FreeTrialDuration: 0,
        FreeTrialType: 'Months',
        PricePlanItems: [
          { ProductName: 'Fiber 500 line', PricePlanItemTypeCode: 'REC', Amount: 39 },
          { ProductName: 'Router rental', PricePlanItemTypeCode: 'REC', Amount: 3.5 },
          { ProductName: 'Installation', PricePlanItemTypeCode: 'OTC', Amount: 79 },
        ],
      },
    },
    provisioning: { ProductCode: 'ROUTER', FieldCodes: ['SerialNumber', 'InstallAddress'] },
  },
  {
    offer: {
      OfferCode: 'NEWS-ANNUAL',
      Name: 'News Annual',
      Description: 'Digital newspaper, billed yearly.',
      Status: 'Active',
      PricePlan: {
        PricePlanCode: 'NEWS-ANNUAL-Y',
        CurrencyCode: 'USD',
        FreeTrialDuration: 1,
        FreeTrialType: 'Months',
        PricePlanItems: [{ ProductName: 'News Annual', PricePlanItemTypeCode: 'REC', Amount: 99 }],
      },
    },
  },
  {
    offer: {
      OfferCode: 'LEGACY-2019',
      Name: 'Legacy bundle 2019',
      Description: 'No longer sold.',
      Status: 'Retired',
      PricePlan: {
        PricePlanCode: 'LEGACY-2019-M',
        CurrencyCode: 'EUR',
        FreeTrialDuration: 0,
        FreeTrialType: 'Days',
        PricePlanItems: [{ ProductName: 'Legacy bundle', PricePlanItemTypeCode: 'REC', Amount: 19.9 }],
      },
    },
  },
];

/**
 * Payment methods with fixed keys, each on a seeded customer, so that card
 * update files (samples/cards.csv) have keys to point at: the sign-up response
 * carries no PaymentMethodKey.
 */
export const SEED_PAYMENT_METHOD_KEYS = [
  '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01',
  '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e02',
  '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e03',
  '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e04',
  '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e05',
] as const;

/** A seeded customer's fields: the store gives it its CustomerID, CollectionMethod and Password. */
export type SeedCustomer = Omit<Customer, 'CustomerID' | 'CollectionMethod' | 'Password'>;

/** Every field blank, MobileNumber null: the base each seeded customer overrides. */
export const BLANK_CUSTOMER: SeedCustomer = {
  FirstName: '', MiddleName: '', LastName: '', NamePrefix: '', NameSuffix: '', Title: '', Company: '',
  EmailAddress: '', AddressLine1: '', AddressLine2: '', City: '', StateProvince: '', PostalCode: '',
  CountryCode: '', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
};

/** The customers owning the seeded payment methods, one each, in key order. */
export const SEED_CUSTOMERS: readonly SeedCustomer[] = [
  { ...BLANK_CUSTOMER, FirstName: 'Margaux', LastName: 'Delacroix', EmailAddress: 'margaux.delacroix@example.fr', City: 'Lyon', CountryCode: 'FRA' },
  { ...BLANK_CUSTOMER, FirstName: 'Seán', LastName: "O'Brien", EmailAddress: 'sean.obrien@example.ie', City: 'Cork', CountryCode: 'IRL' },
  { ...BLANK_CUSTOMER, FirstName: 'Jürgen', LastName: 'Müller', EmailAddress: 'j.mueller@example.de', City: 'München', CountryCode: 'DEU', MobileNumber: '+49 170 1234567' },
  { ...BLANK_CUSTOMER, FirstName: 'Ana', LastName: 'Souza', EmailAddress: 'ana.souza@example.com.br', City: 'São Paulo', CountryCode: 'BRA' },
  { ...BLANK_CUSTOMER, FirstName: 'Kenji', LastName: 'Watanabe', EmailAddress: 'kenji.w@example.jp', City: 'Osaka', CountryCode: 'JPN' },
];
