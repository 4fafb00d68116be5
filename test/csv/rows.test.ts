import { describe, expect, it } from 'vitest';
import { CustomerInputSchema, SignupRequestSchema, UpdatePaymentMethodRequestSchema, type CustomerInput } from '../../src/api/schemas/index.js';
import { planColumns, type ColumnPlan } from '../../src/csv/columns.js';
import { PASSWORD_MASK } from '../../src/secrets.js';
import {
  buildCardUpdate,
  buildCustomerInput,
  buildSignupRequest,
  cellOf,
  maskCells,
  secretValues,
  secretColumnIndexes,
  show,
  surelyParses,
  toApiExpiry,
  validateRow,
  type RowError,
  type RowOptions,
} from '../../src/csv/rows.js';
import type { ImportKind } from '../../src/outcomes.js';

const NOW = new Date('2026-11-22T00:00:00Z');
const OPTIONS: RowOptions = { expiryFormat: 'MMYY', now: NOW };
const CARD = '4111111111111111';
const BAD_LUHN = '4111111111111112';
const AMEX = '378282246310005';
const KEY = '6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01';

/** A plan and a row builder from a header and default values: `make({ Column: value })` gives the cells. */
function fixture(kind: ImportKind, defaults: Record<string, string>): { plan: ColumnPlan; cells(overrides?: Record<string, string>): string[] } {
  const headers = Object.keys(defaults);
  const plan = planColumns({ file: 'in.csv', kind, headers });
  return {
    plan,
    cells: (overrides = {}) => headers.map((header) => overrides[header] ?? defaults[header] ?? ''),
  };
}

const validate = (plan: ColumnPlan, cells: string[], options: RowOptions = OPTIONS, row = 7): RowError[] =>
  validateRow(plan, { row, line: row + 1, cells }, options);

/** The one error of a row: its column, rule and message. */
function onlyError(errors: RowError[]): RowError {
  expect(errors).toHaveLength(1);
  const [error] = errors;
  if (!error) throw new Error('no error');
  return error;
}

const customers = fixture('customers', {
  FirstName: 'Zoë',
  LastName: "O'Connor",
  EmailAddress: 'zoe@example.com',
  CountryCode: 'IRL',
  MobileNumber: '',
  AddressLine1: '1 Main St, Apt 2',
});

const signups = fixture('signups', {
  'Customer.FirstName': 'João',
  'Customer.LastName': 'Müller',
  'Customer.EmailAddress': 'joao@example.com',
  'Customer.CountryCode': 'BRA',
  'Customer.MobileNumber': '',
  'CreditCardInfo.AccountNumber': CARD,
  'CreditCardInfo.ExpirationDate': '1230',
  'CreditCardInfo.CVCode': '737',
  'CreditCardInfo.CountryCode': 'BRA',
  'Subscription.OfferCode': 'FIBER-500',
  'Subscription.SubscriptionItems[0].ProductCode': 'ROUTER',
  'Subscription.SubscriptionItems[0].Fields.SerialNumber': 'SN-1',
  'Subscription.SubscriptionItems[0].Fields.InstallAddress': '1 Rua, São Paulo',
  'Subscription.SubscriptionItems[1].ProductCode': '',
  'Subscription.SubscriptionItems[1].SubscriptionItemID': '',
});

const cards = fixture('cards', {
  PaymentMethodKey: KEY,
  AccountNumber: CARD,
  ExpirationDate: '0629',
  CVCode: '737',
  CountryCode: 'GBR',
  FirstName: 'Ada',
});

describe('validateRow', () => {
  it('passes good rows of every kind', () => {
    expect(validate(customers.plan, customers.cells())).toEqual([]);
    expect(validate(signups.plan, signups.cells())).toEqual([]);
    expect(validate(cards.plan, cards.cells())).toEqual([]);
  });

  it('reports a cell count that differs from the header, and nothing else', () => {
    const error = onlyError(validate(customers.plan, ['Zoë', "O'Connor", 'not-an-email']));
    expect(error).toMatchObject({ row: 7, column: '', rule: 'column-count' });
    expect(error.message).toBe(
      'row 7 (spreadsheet row 8, line 8): 3 cells where the header has 6; check for an unquoted comma or a missing cell (rule: column-count)',
    );
    expect(onlyError(validate(customers.plan, [...customers.cells(), 'extra'])).rule).toBe('column-count');
  });

  it('email: the shape of an address, when not empty', () => {
    const error = onlyError(validate(customers.plan, customers.cells({ EmailAddress: 'bob@' })));
    expect(error).toEqual({
      row: 7,
      column: 'EmailAddress',
      rule: 'email',
      message: 'row 7 (spreadsheet row 8, line 8), column "EmailAddress": "bob@" is not an email address (rule: email)',
    });
    expect(validate(customers.plan, customers.cells({ EmailAddress: '' }))).toEqual([]);
    expect(onlyError(validate(signups.plan, signups.cells({ 'Customer.EmailAddress': 'a b@c.d' }))).column).toBe('Customer.EmailAddress');
  });

  it('country-code: three letters, when not empty, for customers and cards', () => {
    const error = onlyError(validate(customers.plan, customers.cells({ CountryCode: 'IE' })));
    expect(error).toMatchObject({ column: 'CountryCode', rule: 'country-code' });
    expect(error.message).toContain('"IE" is not a three-letter country code');
    expect(validate(customers.plan, customers.cells({ CountryCode: ' irl ' }))).toEqual([]);
    expect(onlyError(validate(signups.plan, signups.cells({ 'CreditCardInfo.CountryCode': 'BR1' }))).column).toBe('CreditCardInfo.CountryCode');
    expect(onlyError(validate(cards.plan, cards.cells({ CountryCode: 'UK' }))).rule).toBe('country-code');
  });

  it('numeric: CustomerID is numeric text, when not empty', () => {
    const error = onlyError(validate(fixture('customers', { CustomerID: 'A12', EmailAddress: '' }).plan, ['A12', '']));
    expect(error).toMatchObject({ column: 'CustomerID', rule: 'numeric' });
    expect(error.message).toBe('row 7 (spreadsheet row 8, line 8), column "CustomerID": "A12" is not numeric text (a CustomerID is digits only) (rule: numeric)');
  });

  it('required: a new customer needs FirstName and LastName', () => {
    const errors = validate(customers.plan, customers.cells({ FirstName: ' ', LastName: '' }));
    expect(errors.map((e) => [e.column, e.rule])).toEqual([
      ['FirstName', 'required'],
      ['LastName', 'required'],
    ]);
    expect(errors[1]?.message).toBe('row 7 (spreadsheet row 8, line 8), column "LastName": is empty; required for a new customer (no CustomerID) (rule: required)');
  });

  it('required: an update needs no names, but must not blank a present one', () => {
    const updates = fixture('customers', { CustomerID: '100001', LastName: 'Müller', EmailAddress: 'x@example.com' });
    expect(validate(updates.plan, updates.cells())).toEqual([]);
    const error = onlyError(validate(updates.plan, updates.cells({ LastName: '' })));
    expect(error).toMatchObject({ column: 'LastName', rule: 'required' });
    // A create row in an update file: the names are required, and the file has no FirstName column.
    const create = validate(updates.plan, updates.cells({ CustomerID: '' }));
    expect(create.map((e) => e.message)).toEqual([
      'row 7 (spreadsheet row 8, line 8), column "FirstName": is required for a new customer (no CustomerID), but the file has no such column (rule: required)',
    ]);
  });

  it('required: an upsert needs its match field and LastName', () => {
    const upsert: RowOptions = { ...OPTIONS, match: 'EmailAddress' };
    expect(validate(customers.plan, customers.cells(), upsert)).toEqual([]);
    const errors = validate(customers.plan, customers.cells({ EmailAddress: '', LastName: '' }), upsert);
    expect(errors.map((e) => [e.column, e.rule])).toEqual([
      ['LastName', 'required'],
      ['EmailAddress', 'required'],
    ]);
    expect(errors[1]?.message).toContain('to find the customer (--match)');
  });

  it('required: the five sign-up columns and the three card columns', () => {
    const signupErrors = validate(
      signups.plan,
      signups.cells({
        'Customer.FirstName': '',
        'Customer.LastName': '',
        'CreditCardInfo.AccountNumber': '',
        'CreditCardInfo.ExpirationDate': '',
        'Subscription.OfferCode': '',
      }),
    );
    expect(signupErrors.map((e) => [e.column, e.rule])).toEqual([
      ['Customer.FirstName', 'required'],
      ['Customer.LastName', 'required'],
      ['CreditCardInfo.AccountNumber', 'required'],
      ['CreditCardInfo.ExpirationDate', 'required'],
      ['Subscription.OfferCode', 'required'],
    ]);
    const cardErrors = validate(cards.plan, cards.cells({ PaymentMethodKey: '', AccountNumber: '', ExpirationDate: '' }));
    expect(cardErrors.map((e) => [e.column, e.rule])).toEqual([
      ['PaymentMethodKey', 'required'],
      ['AccountNumber', 'required'],
      ['ExpirationDate', 'required'],
    ]);
  });

  it('card-number: digits with a valid Luhn check, never quoted', () => {
    const luhn = onlyError(validate(signups.plan, signups.cells({ 'CreditCardInfo.AccountNumber': BAD_LUHN })));
    expect(luhn).toMatchObject({ column: 'CreditCardInfo.AccountNumber', rule: 'card-number' });
    expect(luhn.message).toBe('row 7 (spreadsheet row 8, line 8), column "CreditCardInfo.AccountNumber": is not a valid card number (Luhn check failed) (rule: card-number)');
    const spaced = onlyError(validate(cards.plan, cards.cells({ AccountNumber: '4111 1111 1111 1111' })));
    expect(spaced.message).toContain('digits only');
    const short = onlyError(validate(cards.plan, cards.cells({ AccountNumber: '41111111' })));
    expect(short.message).toContain('12 to 19 digits');
    for (const error of [luhn, spaced, short]) {
      expect(error.message).not.toMatch(/4111|1112/);
    }
  });

  it('cvc: 3 digits, 4 for American Express, when not empty, never quoted', () => {
    const error = onlyError(validate(cards.plan, cards.cells({ CVCode: '7373' })));
    expect(error).toMatchObject({ column: 'CVCode', rule: 'cvc' });
    expect(error.message).toBe(
      'row 7 (spreadsheet row 8, line 8), column "CVCode": is not a card verification code: 3 digits expected for this card (American Express alone has 4) (rule: cvc)',
    );
    expect(validate(cards.plan, cards.cells({ CVCode: '' }))).toEqual([]);
    expect(validate(cards.plan, cards.cells({ AccountNumber: AMEX, CVCode: '1234' }))).toEqual([]);
    const amexShort = onlyError(validate(cards.plan, cards.cells({ AccountNumber: AMEX, CVCode: '12345' })));
    expect(amexShort.message).toContain('4 digits expected for an American Express card');
    expect(onlyError(validate(signups.plan, signups.cells({ 'CreditCardInfo.CVCode': '12a' }))).rule).toBe('cvc');
    // Without a valid card number the brand is unknown: 3 or 4 digits.
    const unknownBrand = validate(cards.plan, cards.cells({ AccountNumber: BAD_LUHN, CVCode: '1234' }));
    expect(unknownBrand.map((e) => e.rule)).toEqual(['card-number']);
    for (const e of [error, amexShort]) expect(e.message).not.toMatch(/7373|12345/);
  });

  it('expiry: four digits in the file\'s format, not in the past', () => {
    const past = onlyError(validate(cards.plan, cards.cells({ ExpirationDate: '1026' })));
    expect(past).toMatchObject({ column: 'ExpirationDate', rule: 'expiry' });
    expect(past.message).toContain('"1026" is in the past (MMYY)');
    expect(validate(cards.plan, cards.cells({ ExpirationDate: '1126' }))).toEqual([]);
    const malformed = onlyError(validate(cards.plan, cards.cells({ ExpirationDate: '13/26' })));
    expect(malformed.message).toContain('four digits MMYY expected');
    expect(onlyError(validate(cards.plan, cards.cells({ ExpirationDate: '1330' }))).rule).toBe('expiry');
    const yymm: RowOptions = { ...OPTIONS, expiryFormat: 'YYMM' };
    expect(validate(cards.plan, cards.cells({ ExpirationDate: '3012' }), yymm)).toEqual([]);
    expect(onlyError(validate(cards.plan, cards.cells({ ExpirationDate: '1230' }), yymm)).message).toContain('four digits YYMM');
  });

  it('guid: PaymentMethodKey is a GUID', () => {
    const error = onlyError(validate(cards.plan, cards.cells({ PaymentMethodKey: 'not-a-guid' })));
    expect(error).toMatchObject({ column: 'PaymentMethodKey', rule: 'guid' });
    expect(error.message).toContain('"not-a-guid" is not a GUID');
    expect(validate(cards.plan, cards.cells({ PaymentMethodKey: `{${KEY.toUpperCase()}}` }))).toEqual([]);
  });

  it('provisioning: an item with values needs its ProductCode', () => {
    const error = onlyError(validate(signups.plan, signups.cells({ 'Subscription.SubscriptionItems[0].ProductCode': '' })));
    expect(error).toMatchObject({ column: 'Subscription.SubscriptionItems[0].ProductCode', rule: 'provisioning' });
    const second = onlyError(validate(signups.plan, signups.cells({ 'Subscription.SubscriptionItems[1].SubscriptionItemID': 'X1' })));
    expect(second.column).toBe('Subscription.SubscriptionItems[1].ProductCode');
    // No item values at all: nothing to provision.
    const none = signups.cells({
      'Subscription.SubscriptionItems[0].ProductCode': '',
      'Subscription.SubscriptionItems[0].Fields.SerialNumber': '',
      'Subscription.SubscriptionItems[0].Fields.InstallAddress': '',
    });
    expect(validate(signups.plan, none)).toEqual([]);
  });

  it('names the file\'s own header text in messages, after a map', () => {
    const plan = planColumns({ file: 'in.csv', kind: 'customers', headers: ['Given', 'Family', 'Mail'], map: { Given: 'FirstName', Family: 'LastName', Mail: 'EmailAddress' } });
    const error = onlyError(validate(plan, ['Zoë', "O'Connor", 'nope'], OPTIONS, 3));
    expect(error.message).toBe('row 3 (spreadsheet row 4, line 4), column "Mail": "nope" is not an email address (rule: email)');
  });

  it('never quotes a card number, even one in the wrong column', () => {
    const error = onlyError(validate(customers.plan, customers.cells({ EmailAddress: `${CARD}` })));
    expect(error.message).not.toContain(CARD);
    expect(error.message).toContain('1111');
    expect(show('card 4111 1111 1111 1111 here')).toBe('"card ************1111 here"');
    expect(show('x'.repeat(100))).toHaveLength(60 + 3);
  });

  it('keeps every message of a bad card row free of card values', () => {
    const errors = validate(cards.plan, cards.cells({ AccountNumber: BAD_LUHN, CVCode: '99999', ExpirationDate: '0101' }));
    expect(errors.map((e) => e.rule)).toEqual(['card-number', 'expiry', 'cvc']);
    for (const error of errors) {
      expect(error.message).not.toContain(BAD_LUHN);
      expect(error.message).not.toContain('99999');
    }
  });
});

describe('builders', () => {
  it('buildCustomerInput: a create has every member, blanks as \'\', MobileNumber null', () => {
    const body = buildCustomerInput(customers.plan, customers.cells({ FirstName: '  Zoë  ' }));
    expect(CustomerInputSchema.parse(body)).toEqual(body);
    expect(body).toMatchObject({
      FirstName: 'Zoë',
      LastName: "O'Connor",
      AddressLine1: '1 Main St, Apt 2',
      City: '',
      Password: '',
      MobileNumber: null,
    });
    const mobile = buildCustomerInput(customers.plan, customers.cells({ MobileNumber: '+353 87 123 4567' }));
    expect(mobile.MobileNumber).toBe('+353 87 123 4567');
  });

  it('buildCustomerInput: an update keeps absent columns and clears present empty ones', () => {
    const base: CustomerInput = {
      ...buildCustomerInput(customers.plan, customers.cells()),
      City: 'Cork',
      Company: 'Acme',
      MobileNumber: '+353 1',
      Password: 'kept',
    };
    const updates = fixture('customers', { CustomerID: '100001', EmailAddress: '', City: 'Dublin', MobileNumber: '' });
    const body = buildCustomerInput(updates.plan, updates.cells(), base);
    expect(body).toEqual({ ...base, EmailAddress: '', City: 'Dublin', MobileNumber: null });
    expect(body).not.toHaveProperty('CustomerID');
    // A base carrying more than a body's members does not leak them.
    const withExtra = { ...base, CustomerID: '100001', CollectionMethod: 'Invoice' };
    expect(buildCustomerInput(updates.plan, updates.cells(), withExtra)).toEqual(body);
  });

  it('buildSignupRequest: items only with values, fields only when not empty, expiry as MMYY', () => {
    const body = buildSignupRequest(signups.plan, signups.cells(), OPTIONS);
    expect(SignupRequestSchema.parse(body)).toEqual(body);
    expect(body.Customer).not.toHaveProperty('Password');
    expect(body.Customer).toMatchObject({ FirstName: 'João', LastName: 'Müller', MobileNumber: null, City: '' });
    expect(body.CreditCardInfo).toMatchObject({ AccountNumber: CARD, ExpirationDate: '1230', CVCode: '737', IPAddress: '' });
    expect(body.Subscription).toEqual({
      OfferCode: 'FIBER-500',
      PromotionCode: '',
      ResellerID: '',
      SubscriptionID: '',
      SubscriptionItems: [
        {
          ProductCode: 'ROUTER',
          SubscriptionItemID: '',
          Fields: [
            { ProductFieldCode: 'SerialNumber', Value: 'SN-1' },
            { ProductFieldCode: 'InstallAddress', Value: '1 Rua, São Paulo' },
          ],
        },
      ],
    });
    const partial = buildSignupRequest(
      signups.plan,
      signups.cells({ 'Subscription.SubscriptionItems[0].Fields.SerialNumber': '', 'Subscription.SubscriptionItems[1].ProductCode': 'EXTRA' }),
      OPTIONS,
    );
    expect(partial.Subscription.SubscriptionItems).toEqual([
      { ProductCode: 'ROUTER', SubscriptionItemID: '', Fields: [{ ProductFieldCode: 'InstallAddress', Value: '1 Rua, São Paulo' }] },
      { ProductCode: 'EXTRA', SubscriptionItemID: '', Fields: [] },
    ]);
    const plain = buildSignupRequest(
      signups.plan,
      signups.cells({
        'Subscription.OfferCode': 'STREAM-PLUS',
        'Subscription.SubscriptionItems[0].ProductCode': '',
        'Subscription.SubscriptionItems[0].Fields.SerialNumber': '',
        'Subscription.SubscriptionItems[0].Fields.InstallAddress': '',
      }),
      OPTIONS,
    );
    expect(plain.Subscription).not.toHaveProperty('SubscriptionItems');
  });

  it('converts a YYMM expiry to MMYY for the API', () => {
    expect(toApiExpiry('3012', 'YYMM')).toBe('1230');
    expect(toApiExpiry('1230', 'MMYY')).toBe('1230');
    expect(toApiExpiry('12/30', 'YYMM')).toBe('12/30');
    const yymm = buildSignupRequest(signups.plan, signups.cells({ 'CreditCardInfo.ExpirationDate': '2906' }), { expiryFormat: 'YYMM' });
    expect(yymm.CreditCardInfo.ExpirationDate).toBe('0629');
    expect(buildCardUpdate(cards.plan, cards.cells({ ExpirationDate: '2906' }), { expiryFormat: 'YYMM' }).body.CreditCard.ExpirationDate).toBe('0629');
  });

  it('buildCardUpdate: the key in the path and in the body, braces dropped', () => {
    const { paymentMethodKey, body } = buildCardUpdate(cards.plan, cards.cells({ PaymentMethodKey: ` {${KEY}} ` }), OPTIONS);
    expect(paymentMethodKey).toBe(KEY);
    expect(UpdatePaymentMethodRequestSchema.parse(body)).toEqual(body);
    expect(body.CreditCard).toEqual({
      AccountNumber: CARD, CVCode: '737', ExpirationDate: '0629', FirstName: 'Ada', LastName: '', AddressLine1: '', AddressLine2: '',
      City: '', StateProvince: '', PostalCode: '', CountryCode: 'GBR', IPAddress: '', PaymentMethodKey: KEY,
    });
  });

  it('cellOf: trimmed, undefined for an absent column, Password as written', () => {
    const withPassword = fixture('customers', { FirstName: ' A ', LastName: 'B', Password: ' p w ' });
    const cells = withPassword.cells();
    expect(cellOf(withPassword.plan, cells, 'FirstName')).toBe('A');
    expect(cellOf(withPassword.plan, cells, 'Password')).toBe(' p w ');
    expect(cellOf(withPassword.plan, cells, 'City')).toBeUndefined();
    expect(cellOf(withPassword.plan, ['A'], 'LastName')).toBe('');
  });
});

describe('masking', () => {
  it('secretColumnIndexes: the card number and CVC columns of card kinds', () => {
    expect(secretColumnIndexes(customers.plan)).toEqual([]);
    expect(secretColumnIndexes(signups.plan)).toEqual([5, 7]);
    expect(secretColumnIndexes(cards.plan)).toEqual([1, 3]);
  });

  it('maskCells: card numbers to their last four, CVCs empty, the rest as written', () => {
    const cells = cards.cells();
    const masked = maskCells(cards.plan, cells);
    expect(masked).toEqual([KEY, '************1111', '0629', '', 'GBR', 'Ada']);
    expect(cells[1]).toBe(CARD);
    expect(maskCells(signups.plan, signups.cells())[5]).toBe('************1111');
    expect(maskCells(signups.plan, signups.cells())[7]).toBe('');
    expect(maskCells(customers.plan, customers.cells())).toEqual(customers.cells());
    expect(maskCells(cards.plan, cards.cells({ AccountNumber: '' }))[1]).toBe('');
  });

  it('maskCells: a masked row masked again is the same (cells are masked again where they are shown)', () => {
    const once = maskCells(cards.plan, cards.cells());
    expect(maskCells(cards.plan, once)).toEqual(once);
  });

  it('maskCells: a password given is written as the mask, an empty one stays empty; a misaligned row masks every cell it may have moved to', () => {
    const withPassword = fixture('customers', { FirstName: 'Ada', LastName: 'Lovelace', Password: 'hunter2 ', City: 'London' });
    expect(maskCells(withPassword.plan, withPassword.cells())).toEqual(['Ada', 'Lovelace', PASSWORD_MASK, 'London']);
    expect(maskCells(withPassword.plan, withPassword.cells({ Password: '' }))).toEqual(['Ada', 'Lovelace', '', 'London']);
    expect(maskCells(withPassword.plan, ['Ada', 'Love', 'lace', 'hunter2', 'London'])).toEqual(['Ada', 'Love', PASSWORD_MASK, PASSWORD_MASK, 'London']);
    expect(maskCells(withPassword.plan, ['Ada', 'hunter2', 'London'])).toEqual(['Ada', PASSWORD_MASK, PASSWORD_MASK]);
    expect(secretValues(withPassword.plan, withPassword.cells())).toEqual(['hunter2 ']);
  });

  it('refuses a Password cell holding the mask of the result files (rule password-withheld)', () => {
    const withPassword = fixture('customers', { FirstName: 'Ada', LastName: 'Lovelace', Password: PASSWORD_MASK });
    const error = onlyError(validateRow(withPassword.plan, { row: 1, line: 2, cells: withPassword.cells() }, { expiryFormat: 'MMYY' }));
    expect(error.rule).toBe('password-withheld');
    expect(error.message).toContain('column "Password": holds ********, which subsync writes in its result files in place of a password');
  });

  it('maskCells: a misaligned card row has every card-like and CVC-like cell masked, wherever it is', () => {
    const masked = maskCells(cards.plan, [KEY, 'Ada', CARD, '0629', '737', 'GBR', 'extra']);
    expect(masked).toEqual([KEY, 'Ada', '************1111', '', '', 'GBR', 'extra']);
  });
});

describe('the shape check without zod', () => {
  const customers = fixture('customers', { FirstName: 'Ana', LastName: 'Silva', EmailAddress: 'ana@example.com', MobileNumber: '' });
  const signups = fixture('signups', {
    'Customer.FirstName': 'Ana', 'Customer.LastName': 'Silva', 'Customer.EmailAddress': 'ana@example.com', 'CreditCardInfo.AccountNumber': CARD,
    'CreditCardInfo.CVCode': '123', 'CreditCardInfo.ExpirationDate': '1230', 'Subscription.OfferCode': 'OFF', 'Subscription.SubscriptionItems[0].ProductCode': 'P1',
    'Subscription.SubscriptionItems[0].Fields.SEATS': '5',
  });
  const customer = buildCustomerInput(customers.plan, customers.cells());
  const signup = buildSignupRequest(signups.plan, signups.cells(), OPTIONS);
  const card = buildCardUpdate(fixture('cards', { PaymentMethodKey: KEY, AccountNumber: CARD, CVCode: '123', ExpirationDate: '1230' }).plan, [KEY, CARD, '123', '1230'], OPTIONS).body;

  it('is sure of the bodies the builders make, as zod is', () => {
    expect(CustomerInputSchema.safeParse(customer).success).toBe(true);
    expect(surelyParses(CustomerInputSchema, customer)).toBe(true);
    expect(signup.Subscription.SubscriptionItems).toHaveLength(1);
    expect(surelyParses(SignupRequestSchema, signup)).toBe(true);
    expect(surelyParses(UpdatePaymentMethodRequestSchema, card)).toBe(true);
  });

  it('is never sure of a body zod refuses, so zod words the error', () => {
    const { Subscription } = signup;
    const bad: Array<[typeof CustomerInputSchema | typeof SignupRequestSchema, unknown]> = [
      [CustomerInputSchema, { ...customer, FirstName: 7 }],
      [CustomerInputSchema, { ...customer, Unknown: 'x' }],
      [CustomerInputSchema, { ...customer, LastName: undefined }],
      [CustomerInputSchema, { ...customer, FirstName: null }],
      [CustomerInputSchema, null],
      [SignupRequestSchema, { ...signup, Subscription: { ...Subscription, SubscriptionItems: [{ ProductCode: 'P1', SubscriptionItemID: '', Fields: [], Extra: 1 }] } }],
      [SignupRequestSchema, { ...signup, Subscription: { ...Subscription, SubscriptionItems: [{ ProductCode: 'P1', SubscriptionItemID: '', Fields: [{ ProductFieldCode: 'A', Value: 5 }] }] } }],
      [SignupRequestSchema, { ...signup, Subscription: { ...Subscription, SubscriptionItems: 'none' } }],
    ];
    for (const [schema, body] of bad) {
      expect(schema.safeParse(body).success).toBe(false);
      expect(surelyParses(schema, body)).toBe(false);
    }
  });
});
