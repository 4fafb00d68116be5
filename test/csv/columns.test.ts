import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CREDIT_CARD_FIELDS, CUSTOMER_INPUT_FIELDS, SIGNUP_CUSTOMER_FIELDS } from '../../src/api/schemas/index.js';
import {
  KNOWN_PATHS,
  closestPath,
  detectKind,
  editDistance,
  loadColumnMap,
  planColumns,
  resolvePath,
  type PlanInput,
} from '../../src/csv/columns.js';
import { ColumnMapError, FileRejectedError } from '../../src/csv/errors.js';
import { tempFolder } from './files.js';

let temp: Awaited<ReturnType<typeof tempFolder>>;
beforeAll(async () => {
  temp = await tempFolder();
});
afterAll(async () => {
  await temp.remove();
});

/** Runs `fn` expecting a FileRejectedError, and returns it. */
function rejected(fn: () => unknown): FileRejectedError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(FileRejectedError);
    if (err instanceof FileRejectedError) return err;
  }
  throw new Error('expected a FileRejectedError');
}

const plan = (input: Omit<PlanInput, 'file'>) => planColumns({ file: 'in.csv', ...input });

describe('known paths', () => {
  it('are derived from the wire schemas', () => {
    expect(KNOWN_PATHS.customers).toEqual(['CustomerID', ...CUSTOMER_INPUT_FIELDS]);
    expect(KNOWN_PATHS.cards).toEqual(['PaymentMethodKey', ...CREDIT_CARD_FIELDS]);
    expect(KNOWN_PATHS.signups).toEqual([
      ...SIGNUP_CUSTOMER_FIELDS.map((f) => `Customer.${f}`),
      ...CREDIT_CARD_FIELDS.map((f) => `CreditCardInfo.${f}`),
      'Subscription.OfferCode',
      'Subscription.PromotionCode',
      'Subscription.ResellerID',
      'Subscription.SubscriptionID',
    ]);
    expect(KNOWN_PATHS.signups).not.toContain('Customer.Password');
  });

  it('resolve provisioning paths by pattern, index 0 to 9, any field code', () => {
    expect(resolvePath('signups', 'Subscription.SubscriptionItems[0].ProductCode')).toBe('Subscription.SubscriptionItems[0].ProductCode');
    expect(resolvePath('signups', 'subscription.subscriptionitems[9].subscriptionitemid')).toBe(
      'Subscription.SubscriptionItems[9].SubscriptionItemID',
    );
    // The field code is data for the service: its case and dots are kept.
    expect(resolvePath('signups', 'SUBSCRIPTION.SubscriptionItems[1].FIELDS.Serial.No')).toBe('Subscription.SubscriptionItems[1].Fields.Serial.No');
    expect(resolvePath('signups', 'Subscription.SubscriptionItems[10].ProductCode')).toBeUndefined();
    expect(resolvePath('signups', 'Subscription.SubscriptionItems[0].Fields.')).toBeUndefined();
    expect(resolvePath('signups', 'Subscription.SubscriptionItems[0].Colour')).toBeUndefined();
    expect(resolvePath('customers', 'Subscription.SubscriptionItems[0].ProductCode')).toBeUndefined();
  });
});

describe('planColumns', () => {
  it('resolves headers to paths, trimming them and accepting any case', () => {
    const result = plan({ kind: 'customers', headers: [' firstname ', 'LastName', 'EMAILADDRESS', 'mobileNumber'] });
    expect(result.kind).toBe('customers');
    expect(result.headers).toEqual([' firstname ', 'LastName', 'EMAILADDRESS', 'mobileNumber']);
    expect(result.paths).toEqual(['FirstName', 'LastName', 'EmailAddress', 'MobileNumber']);
    expect([...result.index]).toEqual([
      ['FirstName', 0],
      ['LastName', 1],
      ['EmailAddress', 2],
      ['MobileNumber', 3],
    ]);
  });

  it('ignores subsync\'s own _ columns, so a fixed errors.csv can be dropped back', () => {
    const result = plan({ kind: 'customers', headers: ['FirstName', 'LastName', '_row', '_error'] });
    expect(result.paths).toEqual(['FirstName', 'LastName', '', '']);
    expect(result.index.size).toBe(2);
  });

  it('names an unknown column with the closest known name', () => {
    const err = rejected(() => plan({ kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAdress'] }));
    expect(err.code).toBe('FILE_REJECTED');
    expect(err.file).toBe('in.csv');
    expect(err.problems).toEqual(['unknown column "EmailAdress" (did you mean "EmailAddress"?)']);
    expect(err.message).toBe('in.csv: rejected: unknown column "EmailAdress" (did you mean "EmailAddress"?)');
  });

  it('suggests across spacing, kinds and item indexes, and not when nothing is close', () => {
    expect(closestPath('customers', 'First Name')).toBe('FirstName');
    expect(closestPath('customers', 'e_mail_address')).toBe('EmailAddress');
    expect(closestPath('signups', 'FirstName')).toBe('Customer.FirstName');
    expect(closestPath('customers', 'Customer.EmailAddress')).toBe('EmailAddress');
    expect(closestPath('cards', 'PaymentMethodKy')).toBe('PaymentMethodKey');
    expect(closestPath('customers', 'Email')).toBe('EmailAddress');
    expect(closestPath('customers', 'Mobile')).toBe('MobileNumber');
    expect(closestPath('customers', 'Name')).toBeUndefined();
    expect(closestPath('customers', 'Favourite colour')).toBeUndefined();
    const err = rejected(() =>
      plan({
        kind: 'signups',
        headers: ['Customer.FirstName', 'Customer.LastName', 'CreditCardInfo.AccountNumber', 'CreditCardInfo.ExpirationDate', 'Subscription.OfferCode', 'Subscription.SubscriptionItems[12].ProductCode', 'Shoe size'],
      }),
    );
    expect(err.problems).toEqual([
      'unknown column "Subscription.SubscriptionItems[12].ProductCode": item index 12 is out of range (0 to 9)',
      'unknown column "Shoe size"',
    ]);
  });

  it('names an empty header by its position; empty ones at the end (a spreadsheet\'s used range) are ignored', () => {
    const err = rejected(() => plan({ kind: 'customers', headers: ['FirstName', '', 'LastName', '  '] }));
    expect(err.problems).toEqual(['unknown column "(empty)" at column 2: every column needs a header']);
  });

  it('lists every problem at once: unknown, duplicate (via the map), missing required, unused map entry', () => {
    const err = rejected(() =>
      plan({
        kind: 'customers',
        headers: ['Surname', 'LastName', 'Emial', 'Town'],
        map: { Surname: 'LastName', Town: 'City', 'Post code': 'PostalCode' },
      }),
    );
    expect(err.problems).toEqual([
      'duplicate column "LastName": "Surname" (column 1) and "LastName" (column 2) both name it',
      'unknown column "Emial" (did you mean "EmailAddress"?)',
      'map entry "Post code" names a column the file lacks',
      'missing required column "FirstName"',
    ]);
    expect(err.message).toContain('; ');
  });

  it('reports case-insensitive duplicates as duplicates', () => {
    const err = rejected(() => plan({ kind: 'customers', headers: ['FirstName', 'LastName', 'firstname'] }));
    expect(err.problems).toEqual(['duplicate column "FirstName": "FirstName" (column 1) and "firstname" (column 3) both name it']);
  });

  it('renames columns through the map, drops columns mapped to null, and checks mapped paths', () => {
    const result = plan({
      kind: 'customers',
      headers: ['Given name', 'Family name', 'Notes', 'E-mail'],
      map: { 'Given name': 'FirstName', ' Family name ': 'lastname', Notes: null, 'E-mail': 'EmailAddress' },
    });
    expect(result.paths).toEqual(['FirstName', 'LastName', '', 'EmailAddress']);
    const err = rejected(() =>
      plan({ kind: 'customers', headers: ['FirstName', 'LastName', 'Mail'], map: { Mail: 'EmailAdres' } }),
    );
    expect(err.problems).toEqual(['column "Mail" is mapped to unknown path "EmailAdres" (did you mean "EmailAddress"?)']);
  });

  it('requires FirstName and LastName of a customers file unless it has CustomerID', () => {
    expect(rejected(() => plan({ kind: 'customers', headers: ['EmailAddress'] })).problems).toEqual([
      'missing required column "FirstName"',
      'missing required column "LastName"',
    ]);
    expect(plan({ kind: 'customers', headers: ['CustomerID', 'EmailAddress'] }).paths).toEqual(['CustomerID', 'EmailAddress']);
  });

  it('requires the sign-up columns', () => {
    expect(rejected(() => plan({ kind: 'signups', headers: ['Customer.FirstName', 'Subscription.PromotionCode'] })).problems).toEqual([
      'missing required column "Customer.LastName"',
      'missing required column "CreditCardInfo.AccountNumber"',
      'missing required column "CreditCardInfo.ExpirationDate"',
      'missing required column "Subscription.OfferCode"',
    ]);
  });

  it('requires the card columns', () => {
    expect(rejected(() => plan({ kind: 'cards', headers: ['CVCode'] })).problems).toEqual([
      'missing required column "PaymentMethodKey"',
      'missing required column "AccountNumber"',
      'missing required column "ExpirationDate"',
    ]);
  });

  it('checks --match: a customer field present in the file, with LastName', () => {
    expect(plan({ kind: 'customers', headers: ['FirstName', 'LastName', 'EmailAddress'], match: 'emailaddress' }).index.get('EmailAddress')).toBe(2);
    expect(rejected(() => plan({ kind: 'customers', headers: ['FirstName', 'LastName'], match: 'EmailAddress' })).problems).toEqual([
      'missing column "EmailAddress", which --match names',
    ]);
    expect(rejected(() => plan({ kind: 'customers', headers: ['CustomerID', 'EmailAddress'], match: 'EmailAddress' })).problems).toEqual([
      'missing column "LastName", which an upsert searches by (--match)',
    ]);
    expect(rejected(() => plan({ kind: 'customers', headers: ['FirstName', 'LastName'], match: 'Emali' })).problems).toEqual([
      '--match "Emali" is not a customer field (did you mean "EmailAddress"?)',
    ]);
  });
});

describe('loadColumnMap', () => {
  it('reads {"Their Column": "Path"} with null to drop a column', async () => {
    const file = await temp.file('map.json', JSON.stringify({ Surname: 'LastName', Notes: null }));
    expect(await loadColumnMap(file)).toEqual({ Surname: 'LastName', Notes: null });
  });

  it('names the map file in every error', async () => {
    const cases: [string, string, RegExp][] = [
      ['notjson.json', '{"a": ', /not JSON/],
      ['array.json', '["LastName"]', /expected an object/],
      ['number.json', '{"Surname": 3}', /entry "Surname"/],
      ['empty.json', '{"Surname": " "}', /entry "Surname": a path must not be empty/],
    ];
    for (const [name, content, pattern] of cases) {
      const file = await temp.file(name, content);
      const err: unknown = await loadColumnMap(file).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ColumnMapError);
      if (!(err instanceof ColumnMapError)) continue;
      expect(err.code).toBe('COLUMN_MAP');
      expect(err.file).toBe(file);
      expect(err.message).toContain(file);
      expect(err.message).toMatch(pattern);
    }
    const missing: unknown = await loadColumnMap(temp.path('absent.json')).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(ColumnMapError);
    expect(String(missing)).toContain('absent.json');
  });
});

describe('detectKind', () => {
  const file = 'in.csv';
  it('takes --kind first, and refuses an unknown one', () => {
    expect(detectKind({ file, explicit: 'cards', inboxFolder: 'customers', headers: ['Customer.FirstName'] })).toBe('cards');
    const err = rejected(() => detectKind({ file, explicit: 'people', headers: ['FirstName'] }));
    expect(err.problems[0]).toContain('unknown kind "people"');
  });

  it('takes the inbox sub-folder next', () => {
    expect(detectKind({ file, inboxFolder: '/var/subsync/inbox/signups', headers: ['FirstName'] })).toBe('signups');
    expect(detectKind({ file, inboxFolder: 'cards', headers: [] })).toBe('cards');
    // A folder that is no kind falls through to the headers.
    expect(detectKind({ file, inboxFolder: 'inbox', headers: ['FirstName'] })).toBe('customers');
  });

  it('reads the kind from the mapped headers otherwise', () => {
    expect(detectKind({ file, headers: ['customer.firstname', 'Subscription.OfferCode'] })).toBe('signups');
    expect(detectKind({ file, headers: ['Name', 'Offer'], map: { Offer: 'Subscription.OfferCode' } })).toBe('signups');
    expect(detectKind({ file, headers: ['PaymentMethodKey', 'AccountNumber'] })).toBe('cards');
    expect(detectKind({ file, headers: ['CustomerID', 'EmailAddress'] })).toBe('customers');
    expect(detectKind({ file, headers: ['Surname'], map: { Surname: 'LastName' } })).toBe('customers');
  });

  it('rejects an undecidable file, saying how to name it', () => {
    const err = rejected(() => detectKind({ file, headers: ['Name', 'Email', '_row'] }));
    expect(err.message).toContain('--kind customers|signups|cards');
    expect(err.message).toContain('inbox/customers/');
  });
});

describe('editDistance', () => {
  it('counts insertions, deletions and substitutions', () => {
    expect(editDistance('', '')).toBe(0);
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(editDistance('emailadress', 'emailaddress')).toBe(1);
    expect(editDistance('abc', '')).toBe(3);
  });
});
