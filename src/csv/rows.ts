/**
 * One row of a planned file: its validation,
 * the request bodies built from it (pure; the workers call these), and its
 * masked copy for results, errors and the dashboard.
 *
 * Decisions:
 * - Cell values are trimmed of surrounding whitespace before they are checked
 *   or sent (a spreadsheet's stray space must not make `GBR ` an invalid
 *   country), except Password, whose spaces may be meant. Identifiers, codes,
 *   emails and card fields ({@link STRICT_FIELDS}) also lose invisible
 *   characters around them (zero-width space, NBSP, BOM, directional marks);
 *   one inside them is refused (rule `invisible`). Names keep theirs: a
 *   Hebrew or Arabic name may need its directional marks.
 * - The formula escape subsync writes into its own CSV files (a `'` before
 *   `=`, `+`, `-`, `@`, tab, CR, LF or NUL) is undone on the way in, so an
 *   export, results.csv or errors.csv imports back to the values it shows.
 * - Every message locates its row three ways: the row number (1 = the first
 *   data record), the spreadsheet row (the header is row 1, blank lines
 *   count) and the file line.
 * - ExpirationDate is checked in the file's `--expiry-format` (MMYY by
 *   default) and always sent to the API as MMYY, the order the service takes;
 *   with `--expiry-format YYMM`, `3012` is sent as `1230`.
 * - A PaymentMethodKey written in braces (`{…}`, a common GUID text form) is
 *   sent without them.
 * - Messages never hold the value of a card number or CVC column, and any
 *   other value quoted in a message has card-number-like digit runs masked
 *   (a card number pasted into the wrong column stays out of the messages).
 */
import { z } from 'zod';
import {
  CREDIT_CARD_FIELDS,
  CUSTOMER_INPUT_FIELDS,
  CustomerInputSchema,
  SIGNUP_CUSTOMER_FIELDS,
  SignupRequestSchema,
  UpdatePaymentMethodRequestSchema,
  describeZodError,
  type CreditCardInfo,
  type CustomerInput,
  type SignupCustomer,
  type SignupRequest,
  type SubscriptionItem,
  type UpdatePaymentMethodRequest,
} from '../api/schemas/index.js';
import {
  cvcLengthFor,
  isCardNumber,
  isCountryCode,
  isCurrentExpiry,
  isCvc,
  isEmailAddress,
  isGuid,
  isNumericText,
  maskCardNumber,
  type ExpiryFormat,
} from '../api/rules.js';
import {
  CUSTOMER_ID,
  PAYMENT_METHOD_KEY,
  cleanHeader,
  REQUIRED_PATHS,
  itemPath,
  parseItemPath,
  resolvePath,
  secretPaths,
  signupCardPath,
  signupCustomerPath,
  subscriptionPath,
  type ColumnPlan,
} from './columns.js';
import type { CsvRow } from './reader.js';
import { codePointName } from './sniff.js';
import {
  SCIENTIFIC_NOTATION,
  WHOLE_FLOAT,
  invisibleInside,
  misdecodedUtf8,
  roundedPast15Digits,
  trimInvisible,
  unescapeFormula,
} from './text.js';
import { PASSWORD_MASK, scrubSecrets } from '../secrets.js';

/** The rule a row broke; every row error names one. */
export type RowRule =
  | 'column-count'
  | 'required'
  | 'country-code'
  | 'expiry'
  | 'card-number'
  | 'cvc'
  | 'email'
  | 'guid'
  | 'numeric'
  | 'provisioning'
  | 'shape'
  | 'invisible'
  | 'misdecoded-text'
  | 'spreadsheet-number'
  | 'repeated-header'
  | 'unnamed-column'
  | 'password-withheld';

export interface RowError {
  /** The row number (1 = the first data record). */
  row: number;
  /** The file's header text of the column; the path when the file has no such column; '' for `column-count`. */
  column: string;
  rule: RowRule;
  /** A sentence for operators: `row 7, column "EmailAddress": "bob@" is not an email address (rule: email)`. */
  message: string;
}

export interface RowOptions {
  /** The order of month and year in the file's ExpirationDate cells. The API always gets MMYY. */
  expiryFormat: ExpiryFormat;
  /** "Now" for the expiry check; default: the current time. */
  now?: Date;
  /** Customers upsert (`--match FIELD`): the match field's path, e.g. `EmailAddress`. */
  match?: string;
  /**
   * Text that looks like UTF-8 read as Windows-1252 and saved again (`Ã«`),
   * or that holds U+FFFD, is meant as written: do not refuse it (rule
   * `misdecoded-text`). Default false.
   */
  acceptMisdecodedText?: boolean;
  /**
   * The file's long numbers show a spreadsheet's rounding (decided on the
   * whole file before any row, see `showsRounding` in src/csv/scan.ts): a
   * card number with zeros past its 15th digit is refused even when its Luhn
   * check passes. Default false.
   */
  roundedCardNumbers?: boolean;
}

type Cells = readonly string[];

/** A customers file's password column. */
export const PASSWORD = 'Password';
/** Paths whose cells are sent as written, without trimming. */
const UNTRIMMED_PATHS: ReadonlySet<string> = new Set([PASSWORD]);

/** Fields (the last segment of a path) that are identifiers, codes, emails or card data: no invisible character belongs in them. */
export const STRICT_FIELDS: ReadonlySet<string> = new Set([
  CUSTOMER_ID, PAYMENT_METHOD_KEY, 'EmailAddress', 'CountryCode', 'OfferCode', 'PromotionCode', 'ResellerID', 'SubscriptionID',
  'ProductCode', 'SubscriptionItemID', 'AccountNumber', 'CVCode', 'ExpirationDate',
]);

/** Fields a spreadsheet turns into numbers when it may (`100001.0`, `4.47E+11`). */
const NUMBER_LIKE_FIELDS: ReadonlySet<string> = new Set([
  CUSTOMER_ID, 'OfferCode', 'PromotionCode', 'ResellerID', 'SubscriptionID', 'ProductCode', 'SubscriptionItemID', 'PostalCode', 'MobileNumber',
]);

const fieldOf = (path: string): string => path.slice(path.lastIndexOf('.') + 1);

/** A cell as it is checked and sent: trimmed, the formula escape undone, invisibles around an identifier dropped. */
export function cleanCell(path: string, cell: string): string {
  return cleanValue(cell, UNTRIMMED_PATHS.has(path), STRICT_FIELDS.has(fieldOf(path)));
}

function cleanValue(cell: string, untrimmed: boolean, strict: boolean): string {
  if (untrimmed) return cell;
  const value = unescapeFormula(cell.trim()).trim();
  return strict ? trimInvisible(value) : value;
}

/**
 * The cell of `path` in a row, as {@link cleanCell} makes it; '' when the row
 * is shorter than the header; undefined when the file has no such column.
 */
export function cellOf(plan: ColumnPlan, cells: Cells, path: string): string | undefined {
  const column = plan.index.get(path);
  if (column === undefined) return undefined;
  return cleanCell(path, cells[column] ?? '');
}

/** What a row's values are read through: by path, as {@link cellOf} reads them. */
export interface RowReader {
  get(path: string): string | undefined;
}

/** Reads a row's cells as they come, cleaning each value when it is read (what a worker reads once per row). */
export const cellReader = (plan: ColumnPlan, cells: Cells): RowReader => ({ get: (path) => cellOf(plan, cells, path) });

/** What each column of a plan is, worked out once per plan rather than once per row. */
interface ColumnInfo {
  path: string;
  /** The column the plan reads its path from (a duplicate column does not). */
  owner: boolean;
  untrimmed: boolean;
  strict: boolean;
  numberLike: boolean;
  /** A card number's or CVC's column. */
  secret: boolean;
  /** A column without a header. */
  unnamed: boolean;
  /** The header as a repeated header row is compared with it. */
  headerKey: string;
}

const columnInfoCache = new WeakMap<ColumnPlan, ColumnInfo[]>();

function columnInfoOf(plan: ColumnPlan): ColumnInfo[] {
  const cached = columnInfoCache.get(plan);
  if (cached) return cached;
  const secret = new Set(secretColumnIndexes(plan));
  const columns = plan.headers.map((header, column): ColumnInfo => {
    const path = plan.paths[column] ?? '';
    const field = fieldOf(path);
    return {
      path,
      owner: path !== '' && plan.index.get(path) === column,
      untrimmed: UNTRIMMED_PATHS.has(path),
      strict: STRICT_FIELDS.has(field),
      numberLike: NUMBER_LIKE_FIELDS.has(field),
      secret: secret.has(column),
      unnamed: cleanHeader(header) === '',
      headerKey: cleanHeader(header).toLowerCase(),
    };
  });
  columnInfoCache.set(plan, columns);
  return columns;
}

/**
 * A row's values, each cleaned once ({@link cleanCell}): validation, the
 * body's shape check, the duplicate guard and the search index each read
 * most of them, and cleaning them again for each would be most of the cost.
 */
export class RowValues implements RowReader {
  /** The cleaned value of each column the plan reads ('' for the others, and past the row's end). */
  readonly byColumn: string[];

  constructor(
    private readonly plan: ColumnPlan,
    cells: Cells,
  ) {
    const columns = columnInfoOf(plan);
    this.byColumn = new Array<string>(columns.length);
    for (let column = 0; column < columns.length; column++) {
      const info = columns[column] as ColumnInfo;
      this.byColumn[column] = info.owner ? cleanValue(cells[column] ?? '', info.untrimmed, info.strict) : '';
    }
  }

  get(path: string): string | undefined {
    const column = this.plan.index.get(path);
    return column === undefined ? undefined : this.byColumn[column];
  }
}

/** ExpirationDate as the API takes it (MMYY), from the file's order; other text is left as it is. */
export function toApiExpiry(value: string, format: ExpiryFormat): string {
  return format === 'YYMM' && /^\d{4}$/.test(value) ? `${value.slice(2)}${value.slice(0, 2)}` : value;
}

/** A GUID without the braces of its `{…}` form. */
const withoutBraces = (key: string): string => key.replace(/^\{(.*)\}$/, '$1');

// ---------------------------------------------------------------------------
// Builders

/** Every member of a create body, blank: '' for text, null for MobileNumber. */
export const BLANK_CUSTOMER_INPUT: CustomerInput = CustomerInputSchema.parse({
  ...Object.fromEntries(CUSTOMER_INPUT_FIELDS.map((field) => [field, ''])),
  MobileNumber: null,
});

/**
 * The body of a customer create or update.
 * - Without `base` (create): every member; the file's value, or '' when the
 *   column is absent; MobileNumber null when empty or absent.
 * - With `base` (update: the customer as read, minus CustomerID and
 *   CollectionMethod): only the file's columns are overlaid; a present column
 *   with an empty cell clears the member ('' or null), an absent one keeps it.
 */
export function buildCustomerInput(plan: ColumnPlan, cells: Cells, base?: CustomerInput): CustomerInput {
  return customerInputOf(cellReader(plan, cells), base);
}

function customerInputOf(row: RowReader, base?: CustomerInput): CustomerInput {
  const body: CustomerInput = { ...BLANK_CUSTOMER_INPUT };
  if (base !== undefined) {
    // Member by member, so that nothing but the body's members is carried over.
    for (const field of CUSTOMER_INPUT_FIELDS) {
      if (field === 'MobileNumber') body.MobileNumber = base.MobileNumber;
      else body[field] = base[field];
    }
  }
  for (const field of CUSTOMER_INPUT_FIELDS) {
    const value = row.get(field);
    if (value === undefined) continue;
    if (field === 'MobileNumber') body.MobileNumber = value === '' ? null : value;
    else body[field] = value;
  }
  return body;
}

/** Every member of a sign-up's customer, blank (the create body without Password). */
const { Password: _password, ...BLANK_SIGNUP_CUSTOMER } = BLANK_CUSTOMER_INPUT;

/** Each card field with its column path: in a sign-up (`CreditCardInfo.X`), and in a card file (`X`). Built once, not per row. */
const SIGNUP_CARD_PATHS = CREDIT_CARD_FIELDS.map((field) => [field, signupCardPath(field)] as const);
const CARD_PATHS = CREDIT_CARD_FIELDS.map((field) => [field, field] as const);
const SIGNUP_CUSTOMER_PATHS = SIGNUP_CUSTOMER_FIELDS.map((field) => [field, signupCustomerPath(field)] as const);
const SUBSCRIPTION_PATHS = {
  OfferCode: subscriptionPath('OfferCode'),
  PromotionCode: subscriptionPath('PromotionCode'),
  ResellerID: subscriptionPath('ResellerID'),
  SubscriptionID: subscriptionPath('SubscriptionID'),
};

function buildCard(row: RowReader, paths: ReadonlyArray<readonly [keyof CreditCardInfo, string]>, format: ExpiryFormat): CreditCardInfo {
  const card: CreditCardInfo = {
    AccountNumber: '', CVCode: '', ExpirationDate: '', FirstName: '', LastName: '', AddressLine1: '', AddressLine2: '',
    City: '', StateProvince: '', PostalCode: '', CountryCode: '', IPAddress: '',
  };
  for (const [field, path] of paths) {
    const value = row.get(path) ?? '';
    card[field] = field === 'ExpirationDate' ? toApiExpiry(value, format) : value;
  }
  return card;
}

/** The provisioning columns of a plan, grouped by item index (computed once per plan). */
interface ItemColumns {
  index: number;
  productCode: number | undefined;
  subscriptionItemId: number | undefined;
  fields: { code: string; column: number }[];
  /** Every column of this item. */
  columns: number[];
}

const itemColumnsCache = new WeakMap<ColumnPlan, ItemColumns[]>();

function itemColumnsOf(plan: ColumnPlan): ItemColumns[] {
  const cached = itemColumnsCache.get(plan);
  if (cached) return cached;
  const byIndex = new Map<number, ItemColumns>();
  plan.paths.forEach((path, column) => {
    if (plan.kind !== 'signups' || path === '' || plan.index.get(path) !== column) return;
    const parsed = parseItemPath(path);
    if (!parsed || !('item' in parsed)) return;
    const { index, member, fieldCode } = parsed.item;
    let item = byIndex.get(index);
    if (!item) {
      item = { index, productCode: undefined, subscriptionItemId: undefined, fields: [], columns: [] };
      byIndex.set(index, item);
    }
    item.columns.push(column);
    if (member === 'ProductCode') item.productCode = column;
    else if (member === 'SubscriptionItemID') item.subscriptionItemId = column;
    else if (fieldCode !== undefined) item.fields.push({ code: fieldCode, column });
  });
  const items = [...byIndex.values()].sort((a, b) => a.index - b.index);
  itemColumnsCache.set(plan, items);
  return items;
}

/** An item column's value ('' for none): item columns are the ones their paths are read from. */
const cellAt = (plan: ColumnPlan, row: RowReader, column: number | undefined): string => (column === undefined ? '' : (row.get(plan.paths[column] ?? '') ?? ''));
const itemHasValues = (plan: ColumnPlan, item: ItemColumns, row: RowReader): boolean => item.columns.some((column) => cellAt(plan, row, column) !== '');

/**
 * The body of POST /json/signups: Customer (no Password), CreditCardInfo
 * (ExpirationDate as MMYY), Subscription. SubscriptionItems only when some
 * item cell has a value: the items in index order, each with one
 * `{ProductFieldCode, Value}` per non-empty `Fields.<code>` cell, in column order.
 */
export function buildSignupRequest(plan: ColumnPlan, cells: Cells, options: Pick<RowOptions, 'expiryFormat'>): SignupRequest {
  return signupRequestOf(plan, cellReader(plan, cells), options);
}

function signupRequestOf(plan: ColumnPlan, row: RowReader, options: Pick<RowOptions, 'expiryFormat'>): SignupRequest {
  const customer: SignupCustomer = { ...BLANK_SIGNUP_CUSTOMER };
  for (const [field, path] of SIGNUP_CUSTOMER_PATHS) {
    const value = row.get(path) ?? '';
    if (field === 'MobileNumber') customer.MobileNumber = value === '' ? null : value;
    else customer[field] = value;
  }
  const subscription = (field: keyof typeof SUBSCRIPTION_PATHS): string => row.get(SUBSCRIPTION_PATHS[field]) ?? '';
  const items: SubscriptionItem[] = itemColumnsOf(plan)
    .filter((item) => itemHasValues(plan, item, row))
    .map((item) => ({
      ProductCode: cellAt(plan, row, item.productCode),
      SubscriptionItemID: cellAt(plan, row, item.subscriptionItemId),
      Fields: item.fields
        .map(({ code, column }) => ({ ProductFieldCode: code, Value: cellAt(plan, row, column) }))
        .filter((field) => field.Value !== ''),
    }));
  return {
    Customer: customer,
    CreditCardInfo: buildCard(row, SIGNUP_CARD_PATHS, options.expiryFormat),
    Subscription: {
      OfferCode: subscription('OfferCode'),
      PromotionCode: subscription('PromotionCode'),
      ResellerID: subscription('ResellerID'),
      SubscriptionID: subscription('SubscriptionID'),
      ...(items.length > 0 ? { SubscriptionItems: items } : {}),
    },
  };
}

/**
 * PUT /json/paymentmethods/{paymentMethodKey}: the key for the path and the
 * body, whose CreditCard.PaymentMethodKey is the same key.
 */
export function buildCardUpdate(
  plan: ColumnPlan,
  cells: Cells,
  options: Pick<RowOptions, 'expiryFormat'>,
): { paymentMethodKey: string; body: UpdatePaymentMethodRequest } {
  return cardUpdateOf(cellReader(plan, cells), options);
}

function cardUpdateOf(row: RowReader, options: Pick<RowOptions, 'expiryFormat'>): { paymentMethodKey: string; body: UpdatePaymentMethodRequest } {
  const paymentMethodKey = withoutBraces(row.get(PAYMENT_METHOD_KEY) ?? '');
  const card = buildCard(row, CARD_PATHS, options.expiryFormat);
  return { paymentMethodKey, body: { CreditCard: { ...card, PaymentMethodKey: paymentMethodKey } } };
}

// ---------------------------------------------------------------------------
// Validation

/** What a check found: a sentence, under the check's own rule or another one. */
type Finding = string | { rule: RowRule; text: string } | undefined;

/** A check of one column's non-empty value; `describe` says what is wrong, or undefined when nothing is. */
interface FieldCheck {
  path: string;
  rule: RowRule;
  /** `row` reads another column of the same row (the CVC's length depends on the card number). */
  describe(value: string, options: RowOptions, row: RowReader): Finding;
}

/** The one fix for a value a spreadsheet stored as a number. */
export const STORED_AS_NUMBER = 'this column was stored as a number by a spreadsheet: format it as Text and export again';
const asNumber = (what: string): Finding => ({ rule: 'spreadsheet-number', text: `${what}: ${STORED_AS_NUMBER}` });

const countryCode = (path: string): FieldCheck => ({
  path,
  rule: 'country-code',
  describe: (value) => (isCountryCode(value) ? undefined : `${show(value)} is not a three-letter country code (ISO 3166-1 alpha-3, e.g. GBR)`),
});
const email = (path: string): FieldCheck => ({
  path,
  rule: 'email',
  describe: (value) => (isEmailAddress(value) ? undefined : `${show(value)} is not an email address`),
});
// The card number and the CVC are never quoted: their messages say what is wrong, not what was written.
const cardNumber = (path: string): FieldCheck => ({
  path,
  rule: 'card-number',
  describe: (value, options) => {
    if (SCIENTIFIC_NOTATION.test(value)) return asNumber('is in scientific notation (its last digits are lost)');
    if (!/^\d+$/.test(value)) return 'is not a card number: digits only, without spaces or dashes';
    if (value.length < 12 || value.length > 19) return `is not a card number: 12 to 19 digits expected, it has ${value.length}`;
    if (options.roundedCardNumbers === true && roundedPast15Digits(value)) {
      return asNumber('ends in zeros past its 15th digit, as most long numbers of this file do: a spreadsheet rounded them to 15 digits');
    }
    if (isCardNumber(value)) return undefined;
    if (roundedPast15Digits(value)) return asNumber('ends in zeros past its 15th digit, where a spreadsheet rounds a number to 15 digits');
    return 'is not a valid card number (Luhn check failed)';
  },
});
const cvc = (path: string, cardPath: string): FieldCheck => ({
  path,
  rule: 'cvc',
  describe: (value, _options, row) => {
    if (WHOLE_FLOAT.test(value)) return asNumber('is written as a decimal number');
    const expected = cvcLengthFor(row.get(cardPath) ?? '');
    if (expected === undefined) return isCvc(value) ? undefined : 'is not a card verification code: 3 or 4 digits expected';
    if (/^\d+$/.test(value) && value.length === expected) return undefined;
    const brand = expected === 4 ? 'an American Express card (number starting 34 or 37)' : 'this card (American Express alone has 4)';
    if (/^\d+$/.test(value) && value.length === expected - 1) {
      return asNumber(`has ${value.length} digits, one short of the ${expected} of ${brand}: its leading zero was dropped`);
    }
    return `is not a card verification code: ${expected} digits expected for ${brand}`;
  },
});
const expiry = (path: string): FieldCheck => ({
  path,
  rule: 'expiry',
  describe: (value, options) => {
    const format = options.expiryFormat;
    if (isCurrentExpiry(value, format, options.now ?? new Date())) return undefined;
    if (/^\d{3}$/.test(value)) return asNumber(`${show(value)} has three digits: the leading zero of the ${format === 'MMYY' ? 'month' : 'year'} was dropped`);
    if (WHOLE_FLOAT.test(value) || SCIENTIFIC_NOTATION.test(value)) return asNumber(`${show(value)} is written as a number`);
    const month = Number(format === 'MMYY' ? value.slice(0, 2) : value.slice(2));
    if (!/^\d{4}$/.test(value) || month < 1 || month > 12) {
      return `${show(value)} is not an expiry date: four digits ${format} expected (--expiry-format MMYY|YYMM)`;
    }
    return `${show(value)} is in the past (${format}): the card has expired`;
  },
});
const guid = (path: string): FieldCheck => ({
  path,
  rule: 'guid',
  describe: (value) => (isGuid(value) ? undefined : `${show(value)} is not a GUID (e.g. 6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e01)`),
});
const numeric = (path: string): FieldCheck => ({
  path,
  rule: 'numeric',
  describe: (value) => (isNumericText(value) ? undefined : `${show(value)} is not numeric text (a CustomerID is digits only)`),
});

/**
 * A Password cell holding the mask subsync writes in place of a password
 * (results.csv, errors.csv): the password is not in the file, so the row is
 * refused rather than sent. Sent, the mask would become the customer's
 * password; sent blank instead, an update would clear it (the service's PUT
 * replaces the whole record).
 */
const withheldPassword = (path: string): FieldCheck => ({
  path,
  rule: 'password-withheld',
  describe: (value) =>
    value.trim() === PASSWORD_MASK
      ? `holds ${PASSWORD_MASK}, which subsync writes in its result files in place of a password, so no password is given: type the customer's password in the cell (a blank cell sends an empty password)`
      : undefined,
});

/** The format checks of each kind, applied to non-empty cells (emptiness is the `required` rule's business). */
const FIELD_CHECKS: Readonly<Record<ColumnPlan['kind'], readonly FieldCheck[]>> = {
  customers: [numeric(CUSTOMER_ID), email('EmailAddress'), countryCode('CountryCode'), withheldPassword(PASSWORD)],
  signups: [
    email(signupCustomerPath('EmailAddress')),
    countryCode(signupCustomerPath('CountryCode')),
    cardNumber(signupCardPath('AccountNumber')),
    expiry(signupCardPath('ExpirationDate')),
    cvc(signupCardPath('CVCode'), signupCardPath('AccountNumber')),
    countryCode(signupCardPath('CountryCode')),
  ],
  cards: [guid(PAYMENT_METHOD_KEY), cardNumber('AccountNumber'), expiry('ExpirationDate'), cvc('CVCode', 'AccountNumber'), countryCode('CountryCode')],
};

/** Where a row is: its number, and when it comes from a file, its spreadsheet row and line. */
function locate(row: CsvRow): string {
  return row.line > 0 ? `row ${row.row} (spreadsheet row ${row.sheetRow ?? row.row + 1}, line ${row.line})` : `row ${row.row}`;
}

/**
 * Every rule the row breaks, none when it may be sent. A
 * row that repeats the header, or whose cell count differs from the header's,
 * reports only that: its values are not where their columns say, so nothing
 * else about it is true. `values` are the row's cells cleaned (the producer
 * reads them again after the check); made here when not given.
 */
export function validateRow(plan: ColumnPlan, row: CsvRow, options: RowOptions, values: RowValues = new RowValues(plan, row.cells)): RowError[] {
  const { cells } = row;
  const repeated = repeatedHeader(plan, cells);
  if (repeated !== undefined) {
    const rule: RowRule = 'repeated-header';
    return [{ row: row.row, column: '', rule, message: `${locate(row)}: ${repeated}; the row is not sent (rule: ${rule})` }];
  }

  if (!fitsHeader(plan, cells)) {
    const rule: RowRule = 'column-count';
    const text = `${row.line > 0 ? locate(row) : `row ${row.row}`}: ${cells.length} cells where the header has ${plan.headers.length}; check for an unquoted comma or a missing cell (rule: ${rule})`;
    return [{ row: row.row, column: '', rule, message: text }];
  }

  // Made at the first problem: most rows have none, and no closure or list is made for them.
  let found: Findings | undefined;
  for (const problem of cellProblems(plan, cells, values, options)) {
    found ??= new Findings(plan, row);
    if (problem.path === undefined) {
      const rule = problem.rule;
      found.errors.push({ column: problem.column, error: { row: row.row, column: '', rule, message: `${locate(row)}, column ${problem.column + 1}: ${problem.text} (rule: ${rule})` } });
    } else found.report(problem.path, problem.rule, problem.text);
  }

  const required = requiredProblems(plan, values, options);
  for (const { path, text } of required) (found ??= new Findings(plan, row)).report(path, 'required', text);

  for (const check of FIELD_CHECKS[plan.kind]) {
    const value = values.get(check.path);
    if (value === undefined || value === '' || found?.reported?.has(check.path) === true) continue;
    const finding = check.describe(value, options, values);
    if (finding === undefined) continue;
    found ??= new Findings(plan, row);
    if (typeof finding === 'string') found.report(check.path, check.rule, finding);
    else found.report(check.path, finding.rule, finding.text);
  }

  if (plan.kind === 'signups') {
    for (const item of itemColumnsOf(plan)) {
      if (cellAt(plan, values, item.productCode) !== '' || !itemHasValues(plan, item, values)) continue;
      const path = itemPath(item.index, 'ProductCode');
      (found ??= new Findings(plan, row)).report(path, 'provisioning', `is empty, but item ${item.index} has other values: every subscription item needs its ProductCode`);
    }
  }

  const shape = shapeProblem(plan, values, options);
  if (shape !== undefined) (found ??= new Findings(plan, row)).report(shape.path, 'shape', shape.text);

  const errors = found?.errors;
  if (errors === undefined || errors.length === 0) return [];
  if (errors.length === 1) return [(errors[0] as { error: RowError }).error];
  return errors.sort((a, b) => a.column - b.column).map(({ error }) => error);
}

/** The problems of one row, each under its column's header, in the order found (sorted by column at the end). */
class Findings {
  readonly errors: { column: number; error: RowError }[] = [];
  reported: Set<string> | undefined;

  constructor(
    private readonly plan: ColumnPlan,
    private readonly row: CsvRow,
  ) {}

  report(path: string, rule: RowRule, text: string): void {
    const column = this.plan.index.get(path);
    const name = column === undefined ? path : cleanHeader(this.plan.headers[column] ?? path);
    (this.reported ??= new Set()).add(path);
    this.errors.push({
      column: column ?? Number.MAX_SAFE_INTEGER,
      error: { row: this.row.row, column: name, rule, message: `${locate(this.row)}, column "${name}": ${text} (rule: ${rule})` },
    });
  }
}

/**
 * Whether the row's cells line up with the header: as many, or fewer or more
 * only by unnamed columns at the end (a spreadsheet's used range), the extra
 * ones empty.
 */
function fitsHeader(plan: ColumnPlan, cells: Cells): boolean {
  if (cells.length === plan.headers.length) return true;
  const named = plan.headers.findLastIndex((header) => cleanHeader(header) !== '') + 1;
  if (named === plan.headers.length) return false;
  return cells.length >= named && cells.slice(plan.headers.length).every((cell) => cell.trim() === '');
}

/**
 * Why the row is a header again, or undefined: its cells are the header's (two
 * exports joined, `copy /b a.csv+b.csv`), or it starts with a byte order mark
 * (the second file's, mid-file).
 */
function repeatedHeader(plan: ColumnPlan, cells: Cells): string | undefined {
  const columns = columnInfoOf(plan);
  const same =
    cells.length >= plan.headers.length &&
    columns.every((column, i) => column.headerKey === cleanHeader(cells[i] ?? '').toLowerCase()) &&
    columns.some((column) => !column.unnamed);
  const bom = (cells[0] ?? '').startsWith('\uFEFF');
  if (!same && !bom) return undefined;
  const what = same ? 'repeats the header row' : 'starts with a byte order mark (U+FEFF), which only the start of a file has';
  return `${what}: two files were joined into one (copy /b, cat); split them, or remove the second header${bom ? ' and its byte order mark' : ''}`;
}

/** A problem of one cell found by looking at every column: a path, or none for an unnamed column. */
interface CellProblem {
  path: string | undefined;
  column: number;
  rule: RowRule;
  text: string;
}

const NO_PROBLEMS: readonly CellProblem[] = [];

/**
 * The rules checked on every column: an identifier with an invisible
 * character inside, an identifier or code a spreadsheet turned into a number,
 * text a program misdecoded, a value under an unnamed column.
 */
function cellProblems(plan: ColumnPlan, cells: Cells, values: RowValues, options: RowOptions): readonly CellProblem[] {
  let problems: CellProblem[] | undefined;
  const columns = columnInfoOf(plan);
  for (let column = 0; column < columns.length; column++) {
    const { path, owner, unnamed, strict, numberLike, secret, untrimmed } = columns[column] as ColumnInfo;
    if (path === '') {
      if (unnamed && (cells[column] ?? '').trim() !== '') {
        (problems ??= []).push({ path: undefined, column, rule: 'unnamed-column', text: 'has no header but holds a value: name the column, or clear its cells' });
      }
      continue;
    }
    if (!owner) continue;
    const value = values.byColumn[column] ?? '';
    if (value === '') continue;
    const invisible = strict ? invisibleInside(value) : undefined;
    if (invisible !== undefined && invisible.length > 0) {
      const text = `holds an invisible character inside it (${invisible.join(', ')}), as copying from a web page or a document leaves: type the value again`;
      (problems ??= []).push({ path, column, rule: 'invisible', text });
      continue;
    }
    if (numberLike && (WHOLE_FLOAT.test(value) || SCIENTIFIC_NOTATION.test(value))) {
      (problems ??= []).push({ path, column, rule: 'spreadsheet-number', text: `${show(value)} is written as a number: ${STORED_AS_NUMBER}` });
      continue;
    }
    // Card data and passwords are never quoted in a message, so never checked for text a program misread.
    if (options.acceptMisdecodedText === true || secret || untrimmed) continue;
    const misdecoded = misdecodedText(value);
    if (misdecoded !== undefined) (problems ??= []).push({ path, column, rule: 'misdecoded-text', text: misdecoded });
  }
  return problems ?? NO_PROBLEMS;
}

/** Why `value` looks like text a program misread, or undefined. */
function misdecodedText(value: string): string | undefined {
  const unless = '(if it is meant as written, import with --accept-misdecoded-text)';
  if (value.includes('\uFFFD')) {
    return (
      `${show(value)} holds U+FFFD, the character a program writes where it could not read one, so the original letter is lost: ` +
      `type the value again, or save the file again from its source as "CSV UTF-8" ${unless}`
    );
  }
  const found = misdecodedUtf8(value);
  if (found === undefined) return undefined;
  return (
    `${show(value)} looks like UTF-8 text read as Windows-1252 and saved again (${show(found.found)} was ${show(found.meant)}): ` +
    `open the original file as UTF-8 (Excel: Data > From Text/CSV, File Origin "65001: Unicode (UTF-8)") and save it as "CSV UTF-8" ${unless}`
  );
}

/** The `required` rule: which required values are empty in this row, and why they are required. */
function requiredProblems(plan: ColumnPlan, row: RowReader, options: RowOptions): { path: string; text: string }[] {
  const problems: { path: string; text: string }[] = [];
  const blank = (path: string): boolean => (row.get(path) ?? '') === '';
  const require = (path: string, why: string): void => {
    if (!blank(path)) return;
    const absent = plan.index.get(path) === undefined;
    problems.push({ path, text: absent ? `is required ${why}, but the file has no such column` : `is empty; required ${why}` });
  };

  switch (plan.kind) {
    case 'customers': {
      if (blank(CUSTOMER_ID)) {
        // A create, or an upsert that may create: the service refuses a customer without names.
        const why = options.match === undefined ? 'for a new customer (no CustomerID)' : 'for an upsert (no CustomerID)';
        for (const path of REQUIRED_PATHS.customers) require(path, why);
        const match = options.match === undefined ? undefined : (resolvePath('customers', options.match.trim()) ?? options.match);
        if (match !== undefined && match !== 'LastName') require(match, 'to find the customer (--match)');
      } else {
        // An update: an absent column keeps the stored name, but a blank one would clear it.
        for (const path of REQUIRED_PATHS.customers) {
          if (plan.index.has(path) && blank(path)) {
            problems.push({ path, text: 'is empty: a customer cannot be updated to a blank name (leave the column out to keep it)' });
          }
        }
      }
      break;
    }
    case 'signups':
      for (const path of REQUIRED_PATHS.signups) require(path, 'for a sign-up');
      break;
    case 'cards':
      for (const path of REQUIRED_PATHS.cards) require(path, 'for a card update');
      break;
  }
  return problems;
}

/** The last guard: the body this row would send parses with its wire schema. */
function shapeProblem(plan: ColumnPlan, row: RowReader, options: RowOptions): { path: string; text: string } | undefined {
  const [schema, body] = ((): [z.ZodType, unknown] => {
    switch (plan.kind) {
      case 'customers':
        return [CustomerInputSchema, customerInputOf(row)];
      case 'signups':
        return [SignupRequestSchema, signupRequestOf(plan, row, options)];
      case 'cards':
        return [UpdatePaymentMethodRequestSchema, cardUpdateOf(row, options).body];
    }
  })();
  // Zod is asked only about a body the plain check is not sure of: it alone words what is wrong.
  if (surelyParsesWith(schema)(body)) return undefined;
  const parsed = schema.safeParse(body);
  if (parsed.success) return undefined;
  const first = parsed.error.issues[0];
  return { path: first?.path.join('.') || '(body)', text: `the request body would not be valid: ${describeZodError(parsed.error)}` };
}

/** True when a value surely parses; false when only the schema can tell. */
type SureCheck = (value: unknown) => boolean;

const sureChecks = new WeakMap<z.ZodType, SureCheck>();
const NOT_SURE: SureCheck = () => false;

/**
 * A plain check that a value parses with `schema`, made once from the
 * schema's own definition: strings without refinements, nullables,
 * optionals, arrays and objects (a strict one refuses other members). Any
 * other schema, or a refinement, makes it answer "not sure", and the
 * schema itself is asked. Parsing every row's body with zod cost more than
 * the rest of its check; the bodies the builders make are plain strings.
 */
/** Whether `value` surely parses with `schema` (false: only the schema can tell). Exported for its tests. */
export const surelyParses = (schema: z.ZodType, value: unknown): boolean => surelyParsesWith(schema)(value);

function surelyParsesWith(schema: z.ZodType): SureCheck {
  let check = sureChecks.get(schema);
  if (check === undefined) {
    check = sureCheckOf(schema);
    sureChecks.set(schema, check);
  }
  return check;
}

function sureCheckOf(schema: z.ZodType): SureCheck {
  if ((schema.def.checks ?? []).length > 0) return NOT_SURE;
  if (schema instanceof z.ZodString) return (value) => typeof value === 'string';
  if (schema instanceof z.ZodNullable) {
    const inner = sureCheckOf(schema.unwrap() as z.ZodType);
    return (value) => value === null || inner(value);
  }
  if (schema instanceof z.ZodOptional) {
    const inner = sureCheckOf(schema.unwrap() as z.ZodType);
    return (value) => value === undefined || inner(value);
  }
  if (schema instanceof z.ZodArray) {
    const element = sureCheckOf(schema.element as z.ZodType);
    return (value) => Array.isArray(value) && value.every(element);
  }
  if (schema instanceof z.ZodObject) {
    const catchall = (schema.def.catchall as z.ZodType | undefined)?.def.type;
    // Only a strict object (catchall never) and a stripping one (none) are known here.
    if (catchall !== undefined && catchall !== 'never') return NOT_SURE;
    const members = Object.entries(schema.shape as Record<string, z.ZodType>).map(([key, member]) => [key, sureCheckOf(member)] as const);
    const known = new Set(members.map(([key]) => key));
    return (value) => {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
      const record = value as Record<string, unknown>;
      if (catchall === 'never') {
        for (const key in record) if (!known.has(key)) return false;
      }
      for (const [key, member] of members) if (!member(record[key])) return false;
      return true;
    };
  }
  return NOT_SURE;
}

// ---------------------------------------------------------------------------
// Masking

const MAX_SHOWN = 60;

/** Characters that would be invisible, or change the text's direction, in a message. */
const UNSEEN = /[\u00a0\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

/** A value quoted for a message: card-number-like digit runs masked, invisible characters named (`<U+200B>`), long text cut. */
export function show(value: string): string {
  const masked = scrubSecrets(value);
  const cut = masked.length > MAX_SHOWN ? `${masked.slice(0, MAX_SHOWN)}…` : masked;
  return JSON.stringify(cut).replace(UNSEEN, (char) => `<${codePointName(char)}>`);
}

/** The columns of a plan holding payment-card data: the card number's and the CVC's. */
export function secretColumnIndexes(plan: ColumnPlan): number[] {
  const secret = secretPaths(plan.kind);
  if (!secret) return [];
  return plan.paths.flatMap((path, column) => (path === secret.accountNumber || path === secret.cvCode ? [column] : []));
}

/** The column of a customers file's Password, or undefined (sign-ups send none; card files have none). */
export function passwordColumn(plan: ColumnPlan): number | undefined {
  return plan.kind === 'customers' ? plan.index.get(PASSWORD) : undefined;
}

/**
 * The columns whose cells travel only sealed in job data (src/cards/crypto.ts)
 * and are masked everywhere else: the card number's, the CVC's, and a
 * customers file's Password.
 */
export function sealedColumnIndexes(plan: ColumnPlan): number[] {
  const password = passwordColumn(plan);
  return [...secretColumnIndexes(plan), ...(password === undefined ? [] : [password])].sort((a, b) => a - b);
}

/**
 * The row's secret values as the request carries them (its card number, CVC
 * and password, non-empty ones only): what any text about the row is
 * scrubbed of (src/secrets.ts).
 */
export function secretValues(plan: ColumnPlan, cells: Cells): string[] {
  return sealedColumnIndexes(plan)
    .map((column) => cells[column] ?? '')
    .filter((value) => value.trim() !== '');
}

/**
 * A copy of a row fit for the ledger, results, errors.csv and the dashboard:
 * every card number masked to its last four digits, every CVC empty, every
 * password given written as {@link PASSWORD_MASK} (an empty one stays
 * empty). A row of a card file whose cell count differs from the header has
 * its values out of place, so there every cell shaped like a card number is
 * masked and every cell of 3 or 4 digits alone (a possible CVC) is emptied,
 * whatever its column; in a customers file, every cell the password may have
 * moved to (as far from its column as the row has cells too many or too few)
 * is masked.
 */
export function maskCells(plan: ColumnPlan, cells: Cells): string[] {
  const MASKED_NUMBER = /^\*+\d{0,4}$/;
  const secret = secretPaths(plan.kind);
  const masked = [...cells];
  const misaligned = cells.length !== plan.headers.length;
  const password = passwordColumn(plan);
  if (password !== undefined) {
    const shift = cells.length - plan.headers.length;
    const from = misaligned ? password + Math.min(0, shift) : password;
    const to = misaligned ? password + Math.max(0, shift) : password;
    for (let column = Math.max(0, from); column <= to && column < masked.length; column++) {
      if ((masked[column] ?? '') !== '') masked[column] = PASSWORD_MASK;
    }
  }
  if (!secret) return masked;
  masked.forEach((cell, column) => {
    const path = misaligned ? undefined : plan.paths[column];
    // (A number masked already stays as it is: masking is applied again where cells are shown.)
    if (path === secret.accountNumber) masked[column] = cell.trim() === '' ? '' : MASKED_NUMBER.test(cell.trim()) ? cell : maskCardNumber(cell);
    else if (path === secret.cvCode) masked[column] = '';
    else if (misaligned && /^\s*\d(?:[ -]?\d){11,18}\s*$/.test(cell)) masked[column] = maskCardNumber(cell);
    else if (misaligned && /^\s*\d{3,4}\s*$/.test(cell)) masked[column] = '';
  });
  return masked;
}
