import type { CreditCardInfo, CustomerInput, SignupRequest } from '../../src/api/schemas/index.js';

/** A complete create/update body: every member present, blanks as empty strings. */
export function customerInput(overrides: Partial<CustomerInput> = {}): CustomerInput {
  return {
    FirstName: 'Ada', MiddleName: '', LastName: 'Lovelace', NamePrefix: '', NameSuffix: '', Title: '', Company: '',
    EmailAddress: 'ada@example.com', Password: 's3cret', AddressLine1: '12 St James\'s Square', AddressLine2: '', City: 'London',
    StateProvince: '', PostalCode: 'SW1Y 4JH', CountryCode: 'GBR', HomeNumber: '', MobileNumber: null, WorkNumber: '',
    FAXNumber: '', WebPageURL: '',
    ...overrides,
  };
}

/** Test card numbers with valid Luhn digits (well-known test PANs). */
export const TEST_CARD = '4111111111111111';
export const OTHER_TEST_CARD = '5555555555554444';

export function cardInfo(overrides: Partial<CreditCardInfo> = {}): CreditCardInfo {
  return {
    AccountNumber: TEST_CARD, CVCode: '737', ExpirationDate: '1230', FirstName: 'Ada', LastName: 'Lovelace',
    AddressLine1: '12 St James\'s Square', AddressLine2: '', City: 'London', StateProvince: '', PostalCode: 'SW1Y 4JH',
    CountryCode: 'GBR', IPAddress: '',
    ...overrides,
  };
}

export function signupRequest(overrides: {
  customer?: Partial<SignupRequest['Customer']>;
  card?: Partial<CreditCardInfo>;
  subscription?: Partial<SignupRequest['Subscription']>;
} = {}): SignupRequest {
  const { Password: _password, ...customer } = customerInput(overrides.customer);
  return {
    Customer: customer,
    CreditCardInfo: cardInfo(overrides.card),
    Subscription: { OfferCode: 'STREAM-PLUS', PromotionCode: '', ResellerID: '', SubscriptionID: '', ...overrides.subscription },
  };
}

/** The provisioning FIBER-500 requires in the sandbox. */
export const FIBER_ITEMS: NonNullable<SignupRequest['Subscription']['SubscriptionItems']> = [
  {
    ProductCode: 'ROUTER',
    SubscriptionItemID: '',
    Fields: [
      { ProductFieldCode: 'SerialNumber', Value: 'RT-0042-X' },
      { ProductFieldCode: 'InstallAddress', Value: '4 Rue des Lilas, Lyon' },
    ],
  },
];
