import { createApiClient } from './api/client.js';
import { ApiError } from './api/errors.js';
import { startSandbox } from './sandbox/server.js';
import { SEED_PAYMENT_METHOD_KEYS } from './sandbox/seed.js';

/**
 * The end-to-end demo. What exists so far: the in-process sandbox and the
 * typed client, so the demo calls each of the seven endpoints once over real
 * HTTP and prints what came back. The import pipeline (queue, workers,
 * results files) arrives with the import issue and will replace this body.
 */
export async function runDemo(print: (line: string) => void = console.log): Promise<void> {
  const sandbox = await startSandbox({ port: 0 });
  const client = createApiClient({ baseUrl: sandbox.url });
  const rows: Array<[string, string]> = [];
  const step = async (name: string, action: () => Promise<string>): Promise<void> => {
    try {
      rows.push([name, await action()]);
    } catch (error) {
      rows.push([name, error instanceof ApiError ? `${error.code}: ${error.apiMessage ?? error.message}` : String(error)]);
    }
  };
  const person = {
    FirstName: 'Éloïse', MiddleName: '', LastName: "D'Aubigné", NamePrefix: '', NameSuffix: '', Title: '', Company: 'Atelier, Lyon',
    EmailAddress: 'eloise@example.fr', AddressLine1: '3 rue de la Paix', AddressLine2: '', City: 'Lyon', StateProvince: '',
    PostalCode: '69002', CountryCode: 'FRA', HomeNumber: '', MobileNumber: null, WorkNumber: '', FAXNumber: '', WebPageURL: '',
  };
  const card = {
    AccountNumber: '4111111111111111', CVCode: '737', ExpirationDate: '1230', FirstName: 'Éloïse', LastName: "D'Aubigné",
    AddressLine1: '', AddressLine2: '', City: 'Lyon', StateProvince: '', PostalCode: '69002', CountryCode: 'FRA', IPAddress: '',
  };
  try {
    print(`sandbox listening on ${sandbox.url}`);
    let customerId = '';
    await step('POST /json/customers', async () => {
      customerId = (await client.createCustomer({ ...person, Password: '' })).CustomerID;
      return `created CustomerID ${customerId}`;
    });
    await step(`GET /json/customers/${customerId}`, async () => {
      const { Customer } = await client.getCustomer(customerId);
      return `${Customer.FirstName} ${Customer.LastName}, ${Customer.City}`;
    });
    await step(`PUT /json/customers/${customerId}`, async () => {
      await client.updateCustomer(customerId, { ...person, City: 'Villeurbanne', Password: '' });
      return 'City changed to Villeurbanne';
    });
    await step('GET /json/customers?contains=aub', async () => {
      const page = await client.searchCustomers({ contains: 'aub', skip: 0, take: 100 });
      return `${page.TotalItemCount} match(es)`;
    });
    await step('GET /json/offers/STREAM-PLUS', async () => {
      const { Offer } = await client.getOffer('STREAM-PLUS');
      return `${Offer.Name} (${Offer.Status}), ${Offer.PricePlan.PricePlanItems.length} price plan items`;
    });
    await step('POST /json/signups', async () => {
      const result = await client.signUp({
        Customer: { ...person, FirstName: 'Noé' },
        CreditCardInfo: card,
        Subscription: { OfferCode: 'STREAM-PLUS', PromotionCode: '', ResellerID: '', SubscriptionID: '' },
      });
      return `CustomerID ${result.CustomerID}, SubscriptionID ${result.SubscriptionID}`;
    });
    const key = SEED_PAYMENT_METHOD_KEYS[0];
    await step(`PUT /json/paymentmethods/${key}`, async () => {
      await client.updatePaymentMethod(key, { CreditCard: { ...card, PaymentMethodKey: key } });
      return 'card replaced (card number never printed)';
    });
    await step('POST /json/signups (retired offer)', async () => {
      await client.signUp({
        Customer: person,
        CreditCardInfo: card,
        Subscription: { OfferCode: 'LEGACY-2019', PromotionCode: '', ResellerID: '', SubscriptionID: '' },
      });
      return 'accepted (unexpected)';
    });
    const width = Math.max(...rows.map(([name]) => name.length));
    for (const [name, outcome] of rows) print(`${name.padEnd(width)}  ${outcome}`);
    print('');
    print('The CSV import pipeline (queue, workers, results files) is not built yet; this demo exercises the API client and the sandbox.');
  } finally {
    await client.close();
    await sandbox.close();
  }
}
