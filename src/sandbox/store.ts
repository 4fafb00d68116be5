import { randomUUID } from 'node:crypto';
import {
  ACTIVE_OFFER_STATUS,
  type CreditCard,
  type CreditCardInfo,
  type Customer,
  type CustomerInput,
  type Offer,
  type SearchQuery,
  type SignupCustomer,
  type SignupRequest,
} from '../api/schemas/index.js';
import { isCardNumber, isCountryCode, isCurrentExpiry, isCvc, isEmailAddress } from '../api/rules.js';
import { findDuplicateIdentities, type DuplicateIdentity } from './duplicates.js';
import { personAt } from './population.js';
import { CustomerSearchIndex } from './searchIndex.js';
import { SEED_CUSTOMERS, SEED_OFFERS, SEED_PAYMENT_METHOD_KEYS, type ProvisioningRequirement } from './seed.js';

/**
 * A refusal the sandbox answers with its status and a non-success Message.
 * It is the fake service's own error, not subsync's: it never leaves the
 * sandbox's HTTP handlers (subsync meets it only as an answer, classified by
 * the API client like the real service's), so it is not a SubsyncError and
 * has no code of src/errors.ts.
 */
export class SandboxRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'SandboxRefusal';
  }
}

/** CollectionMethod values are not shown by the interface; the sandbox uses these two. */
export const COLLECTION_METHOD = { created: 'Invoice', signedUp: 'CreditCard' } as const;

export interface StoredPaymentMethod {
  PaymentMethodKey: string;
  CustomerID: string;
  card: CreditCardInfo;
  updates: number;
}

export interface StoredSubscription {
  SubscriptionID: string;
  CustomerID: string;
  OfferCode: string;
  PromotionCode: string;
  ResellerID: string;
  SubscriptionItems: SignupRequest['Subscription']['SubscriptionItems'];
}

/**
 * The sandbox's whole state, in memory. Customers keep their creation order
 * (ascending CustomerID), which is the order search pages in.
 */
export interface SandboxStore {
  searchCustomers(query: SearchQuery): { Customers: Customer[]; TotalItemCount: number };
  getCustomer(customerId: string): Customer;
  createCustomer(input: CustomerInput): Customer;
  updateCustomer(customerId: string, input: CustomerInput): Customer;
  getOffer(offerCode: string): Offer;
  signUp(request: SignupRequest): { customer: Customer; subscription: StoredSubscription; paymentMethod: StoredPaymentMethod };
  updatePaymentMethod(key: string, card: CreditCard): StoredPaymentMethod;
  /** Every customer in CustomerID order: for tests, the export's checks and `/_sandbox/customers`. */
  customers(): readonly Customer[];
  /** How many customers there are, without copying them (`/_sandbox/stats`). */
  customerCount(): number;
  /** The password a customer was given (never in an answer): for tests of what was sent. */
  passwordOf(customerId: string): string | undefined;
  /** Identities (first name, last name, email; trimmed, lower-cased) held by more than one customer. */
  duplicateIdentities(): DuplicateIdentity[];
  subscriptions(): readonly StoredSubscription[];
  paymentMethod(key: string): StoredPaymentMethod | undefined;
}

export interface StoreOptions {
  /** Seed the customers owning the fixed payment-method keys. Default true. */
  seed?: boolean;
  /** People of the population (population.ts) to seed after them, CollectionMethod Invoice. Default 0. */
  seedCustomers?: number;
  /** Which population they come from. Default 1. */
  seedRandom?: number;
}

/** The first CustomerID; each customer's is this plus its position in creation order. */
const FIRST_CUSTOMER_ID = 100_001;

export function createStore(options: StoreOptions = {}): SandboxStore {
  const ordered: Customer[] = [];
  const searchIndex = new CustomerSearchIndex();
  const offers = new Map<string, { offer: Offer; provisioning: ProvisioningRequirement | undefined }>();
  const paymentMethods = new Map<string, StoredPaymentMethod>();
  const subscriptions: StoredSubscription[] = [];
  let nextSubscriptionId = 700_001;

  for (const { offer, provisioning } of SEED_OFFERS) offers.set(offer.OfferCode, { offer, provisioning });

  function insertCustomer(fields: SignupCustomer, password: string, collectionMethod: string): Customer {
    const customer = customerRecord(String(FIRST_CUSTOMER_ID + ordered.length), collectionMethod, fields, password);
    ordered.push(customer);
    searchIndex.add(customer.FirstName, customer.LastName);
    return customer;
  }

  // CustomerIDs are consecutive, so the position is arithmetic; the exact text
  // must still match (" 100001" and "0100001" are not customer 100001).
  function findCustomer(customerId: string): Customer {
    const customer = ordered[Number(customerId) - FIRST_CUSTOMER_ID];
    if (customer?.CustomerID !== customerId) throw new SandboxRefusal(404, `Customer ${customerId} was not found`);
    return customer;
  }

  // The service returns Password empty in responses (the shape shown).
  const present = (customer: Customer): Customer => ({ ...customer, Password: '' });

  if (options.seed !== false) {
    SEED_CUSTOMERS.forEach((fields, i) => {
      const customer = insertCustomer(fields, '', COLLECTION_METHOD.signedUp);
      const key = SEED_PAYMENT_METHOD_KEYS[i];
      if (key === undefined) return;
      // The sandbox never answers with a stored card's number: a seeded method holds none.
      paymentMethods.set(key, {
        PaymentMethodKey: key,
        CustomerID: customer.CustomerID,
        card: {
          AccountNumber: '', CVCode: '', ExpirationDate: '1230', FirstName: fields.FirstName, LastName: fields.LastName,
          AddressLine1: '', AddressLine2: '', City: fields.City, StateProvince: '', PostalCode: '', CountryCode: fields.CountryCode, IPAddress: '',
        },
        updates: 0,
      });
    });
  }
  const seedCustomers = options.seedCustomers ?? 0;
  if (!Number.isSafeInteger(seedCustomers) || seedCustomers < 0) {
    throw new RangeError(`seedCustomers must be a whole number, 0 or more: ${seedCustomers}`);
  }
  const seedRandom = options.seedRandom ?? 1;
  for (let index = 0; index < seedCustomers; index++) {
    insertCustomer(personAt(seedRandom, index), '', COLLECTION_METHOD.created);
  }

  return {
    searchCustomers({ contains, skip, take }) {
      // The same lower-casing as a FirstName/LastName filter, through the index.
      const needle = contains.toLowerCase();
      if (needle === '') return { Customers: ordered.slice(skip, skip + take).map(present), TotalItemCount: ordered.length };
      const positions = searchIndex.matching(needle);
      const page = positions.slice(skip, skip + take).map((position) => present(ordered[position] as Customer));
      return { Customers: page, TotalItemCount: positions.length };
    },

    getCustomer: (customerId) => present(findCustomer(customerId)),

    createCustomer(input) {
      checkPerson(input, 'Customer');
      return present(insertCustomer(withoutPassword(input), input.Password, COLLECTION_METHOD.created));
    },

    updateCustomer(customerId, input) {
      const existing = findCustomer(customerId);
      checkPerson(input, 'Customer');
      // PUT replaces the whole record: every member of the body, blanks included.
      Object.assign(existing, withoutPassword(input), { Password: input.Password });
      searchIndex.rename(Number(customerId) - FIRST_CUSTOMER_ID, existing.FirstName, existing.LastName);
      return present(existing);
    },

    getOffer(offerCode) {
      const entry = offers.get(offerCode);
      if (!entry) throw new SandboxRefusal(404, `Offer ${offerCode} was not found`);
      return entry.offer;
    },

    signUp(request) {
      checkPerson(request.Customer, 'Customer');
      checkCard(request.CreditCardInfo, 'CreditCardInfo');
      const { Subscription } = request;
      const entry = offers.get(Subscription.OfferCode);
      if (!entry) throw new SandboxRefusal(400, `Subscription.OfferCode: offer ${Subscription.OfferCode || '(empty)'} does not exist`);
      if (entry.offer.Status !== ACTIVE_OFFER_STATUS) {
        throw new SandboxRefusal(400, `Subscription.OfferCode: offer ${entry.offer.OfferCode} is ${entry.offer.Status}, not ${ACTIVE_OFFER_STATUS}`);
      }
      checkProvisioning(entry.offer.OfferCode, entry.provisioning, Subscription.SubscriptionItems);
      const customer = insertCustomer(request.Customer, '', COLLECTION_METHOD.signedUp);
      const subscription: StoredSubscription = {
        SubscriptionID: String(nextSubscriptionId++),
        CustomerID: customer.CustomerID,
        OfferCode: Subscription.OfferCode,
        PromotionCode: Subscription.PromotionCode,
        ResellerID: Subscription.ResellerID,
        SubscriptionItems: Subscription.SubscriptionItems,
      };
      subscriptions.push(subscription);
      const paymentMethod: StoredPaymentMethod = {
        PaymentMethodKey: randomUUID(),
        CustomerID: customer.CustomerID,
        card: request.CreditCardInfo,
        updates: 0,
      };
      paymentMethods.set(paymentMethod.PaymentMethodKey, paymentMethod);
      return { customer: present(customer), subscription, paymentMethod };
    },

    updatePaymentMethod(key, card) {
      if (card.PaymentMethodKey.toLowerCase() !== key.toLowerCase()) {
        throw new SandboxRefusal(400, `CreditCard.PaymentMethodKey ${card.PaymentMethodKey || '(empty)'} differs from the key in the path ${key}`);
      }
      const stored = paymentMethods.get(key.toLowerCase());
      if (!stored) throw new SandboxRefusal(404, `Payment method ${key} was not found`);
      const { PaymentMethodKey: _key, ...fields } = card;
      checkCard(fields, 'CreditCard');
      stored.card = fields;
      stored.updates += 1;
      return stored;
    },

    customers: () => ordered.map(present),
    customerCount: () => ordered.length,
    passwordOf: (customerId) => {
      const customer = ordered[Number(customerId) - FIRST_CUSTOMER_ID];
      return customer?.CustomerID === customerId ? customer.Password : undefined;
    },
    duplicateIdentities: () => findDuplicateIdentities(ordered),
    subscriptions: () => subscriptions,
    paymentMethod: (key) => paymentMethods.get(key.toLowerCase()),
  };
}

/**
 * A stored customer, members in the interface's order. Built field by field,
 * not by spreading, so a million of them share one object shape.
 */
function customerRecord(CustomerID: string, CollectionMethod: string, f: SignupCustomer, Password: string): Customer {
  return {
    CustomerID, CollectionMethod,
    FirstName: f.FirstName, MiddleName: f.MiddleName, LastName: f.LastName, NamePrefix: f.NamePrefix, NameSuffix: f.NameSuffix,
    Title: f.Title, Company: f.Company, EmailAddress: f.EmailAddress, AddressLine1: f.AddressLine1, AddressLine2: f.AddressLine2,
    City: f.City, StateProvince: f.StateProvince, PostalCode: f.PostalCode, CountryCode: f.CountryCode, HomeNumber: f.HomeNumber,
    MobileNumber: f.MobileNumber, WorkNumber: f.WorkNumber, FAXNumber: f.FAXNumber, WebPageURL: f.WebPageURL,
    Password,
  };
}

function withoutPassword(input: CustomerInput): SignupCustomer {
  const { Password: _password, ...fields } = input;
  return fields;
}

// The interface does not show which fields are required or their formats;
// the sandbox's rules (README, "The sandbox") are the ones subsync validates
// for itself, so a refusal here means the two disagree.
function checkPerson(person: SignupCustomer, member: string): void {
  if (person.FirstName.trim() === '') throw new SandboxRefusal(400, `${member}.FirstName is required`);
  if (person.LastName.trim() === '') throw new SandboxRefusal(400, `${member}.LastName is required`);
  if (person.EmailAddress !== '' && !isEmailAddress(person.EmailAddress)) {
    throw new SandboxRefusal(400, `${member}.EmailAddress is not a valid email address`);
  }
  if (person.CountryCode !== '' && !isCountryCode(person.CountryCode)) {
    throw new SandboxRefusal(400, `${member}.CountryCode must be a three-letter code`);
  }
}

function checkCard(card: CreditCardInfo, member: string): void {
  if (!isCardNumber(card.AccountNumber)) throw new SandboxRefusal(400, `${member}.AccountNumber is not a valid card number`);
  if (!isCurrentExpiry(card.ExpirationDate)) throw new SandboxRefusal(400, `${member}.ExpirationDate must be MMYY and not in the past`);
  if (card.CVCode !== '' && !isCvc(card.CVCode)) throw new SandboxRefusal(400, `${member}.CVCode must be 3 or 4 digits`);
  if (card.CountryCode !== '' && !isCountryCode(card.CountryCode)) throw new SandboxRefusal(400, `${member}.CountryCode must be a three-letter code`);
}

function checkProvisioning(
  offerCode: string,
  required: ProvisioningRequirement | undefined,
  items: SignupRequest['Subscription']['SubscriptionItems'],
): void {
  if (!required) {
    if (items && items.length > 0) {
      throw new SandboxRefusal(400, `Subscription.SubscriptionItems: offer ${offerCode} takes no provisioning information`);
    }
    return;
  }
  const item = items?.find((i) => i.ProductCode === required.ProductCode);
  if (!item) {
    throw new SandboxRefusal(400, `Subscription.SubscriptionItems: offer ${offerCode} requires provisioning of product ${required.ProductCode}`);
  }
  for (const code of required.FieldCodes) {
    const field = item.Fields.find((f) => f.ProductFieldCode === code);
    if (!field || field.Value.trim() === '') {
      throw new SandboxRefusal(400, `Subscription.SubscriptionItems: product ${required.ProductCode} of offer ${offerCode} requires field ${code}`);
    }
  }
}
