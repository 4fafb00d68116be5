/**
 * The header contract: which columns each kind of file may
 * have, which it must have, how `--map FILE` renames an operator's own
 * columns, and how the kind of a file is decided.
 *
 * Glossary:
 * - header: a cell of the file's first record, as written;
 * - path: where a column's value goes in the request body, e.g. `LastName`
 *   (customers, cards: bare) or `Customer.LastName` (signups: dotted);
 * - plan: the file's headers resolved to paths, once per file, before any row
 *   is read; every row is then read through it.
 *
 * Header matching, in order (each header is trimmed first, of spaces and of
 * invisible characters too: a zero-width space, NBSP, BOM or directional mark
 * pasted with a name, see {@link cleanHeader}):
 * 1. a `--map` entry whose key is the header (keys trimmed too) replaces the
 *    header by its value; a value of `null` drops the column;
 * 2. a header beginning with `_` is one of subsync's own annotation columns
 *    (`_row`, `_status`, `_error`, …, as results.csv and errors.csv carry
 *    them) and is ignored, so an errors.csv, once fixed, can be dropped back;
 * 3. an exact path is taken as it is;
 * 4. otherwise a case-insensitive match is accepted and normalised to the
 *    canonical path (`firstname` → `FirstName`). Case is the commonest
 *    difference between an operator's header and the contract, and no two
 *    paths differ only in case, so this is never ambiguous. The ProductFieldCode
 *    after `Fields.` is data for the service and keeps its case as written.
 * A column the service owns and a customer body does not carry
 * (`CollectionMethod`, as an export has it) is recognised and ignored, so an
 * export dropped back as an update file needs no `--map`. Empty headers at the
 * end of the header row (a spreadsheet's used range: `FirstName,LastName,,`)
 * are ignored too; a value under one is refused row by row.
 * Anything else is an unknown column, and rejects the file.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import {
  CARD_SECRET_FIELDS,
  CREDIT_CARD_FIELDS,
  CUSTOMER_INPUT_FIELDS,
  SIGNUP_CUSTOMER_FIELDS,
  SubscriptionItemSchema,
  SubscriptionSchema,
} from '../api/schemas/index.js';
import { IMPORT_KINDS, type ImportKind } from '../outcomes.js';
import { ColumnMapError, FileRejectedError } from './errors.js';
import { showText } from './sniff.js';

/** `--map FILE`: `{"Their Column": "Path"}`; a `null` path drops the column. */
export type ColumnMap = Readonly<Record<string, string | null>>;

/** A file's headers resolved to paths; computed once per file by {@link planColumns}. */
export interface ColumnPlan {
  kind: ImportKind;
  /** The header cells as in the file (results.csv and errors.csv repeat them). */
  headers: string[];
  /** The canonical path of each column, same index as `headers`; '' for a column that is not imported. */
  paths: string[];
  /** Canonical path → column index, for the imported columns. */
  index: ReadonlyMap<string, number>;
}

/** The card number's and the CVC's field names (payment-card data). */
const [ACCOUNT_NUMBER, CV_CODE] = CARD_SECRET_FIELDS;

/** The key of a stored payment method: the path parameter of a card update. */
export const PAYMENT_METHOD_KEY = 'PaymentMethodKey';
/** The customer identifier: a customers row with one is an update. */
export const CUSTOMER_ID = 'CustomerID';

/** Columns the service owns: read back and exported, never sent; ignored in a customers file. */
export const SERVICE_OWNED_PATHS: Readonly<Record<ImportKind, readonly string[]>> = {
  customers: ['CollectionMethod'],
  signups: [],
  cards: [],
};

/** Invisible characters a copy and paste or a spreadsheet leaves around text: NBSP, zero-width, BOM, directional marks. */
export const INVISIBLE_CHARACTERS = '\u00a0\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff';
const SURROUNDING_INVISIBLES = new RegExp(`^[\\s${INVISIBLE_CHARACTERS}]+|[\\s${INVISIBLE_CHARACTERS}]+$`, 'g');

/** A header as matched: trimmed of spaces and of invisible characters around it. */
export const cleanHeader = (header: string): string => header.replace(SURROUNDING_INVISIBLES, '');

/** Provisioning items a sign-up row may carry: `SubscriptionItems[0]` to `[9]`. */
export const MAX_SUBSCRIPTION_ITEMS = 10;

const SUBSCRIPTION_FIELDS = Object.keys(SubscriptionSchema.shape).filter((name) => name !== 'SubscriptionItems');
const ITEM_FIELDS = Object.keys(SubscriptionItemSchema.shape).filter((name) => name !== 'Fields');
const ITEMS_PREFIX = 'Subscription.SubscriptionItems';

/** Signup paths: `Customer.` and `CreditCardInfo.` members. */
export const signupCustomerPath = (field: string): string => `Customer.${field}`;
export const signupCardPath = (field: string): string => `CreditCardInfo.${field}`;
export const subscriptionPath = (field: string): string => `Subscription.${field}`;

/** The fixed paths of each kind, derived from the wire schemas (provisioning paths are patterns, see {@link parseItemPath}). */
export const KNOWN_PATHS: Readonly<Record<ImportKind, readonly string[]>> = {
  customers: [CUSTOMER_ID, ...CUSTOMER_INPUT_FIELDS],
  signups: [
    ...SIGNUP_CUSTOMER_FIELDS.map(signupCustomerPath),
    ...CREDIT_CARD_FIELDS.map(signupCardPath),
    ...SUBSCRIPTION_FIELDS.map(subscriptionPath),
  ],
  cards: [PAYMENT_METHOD_KEY, ...CREDIT_CARD_FIELDS],
};

/**
 * Columns a file of each kind must have. For customers, `FirstName` and
 * `LastName` only when the file has no `CustomerID` column (an update file may
 * carry just the columns it changes); see {@link requiredPaths}.
 */
export const REQUIRED_PATHS: Readonly<Record<ImportKind, readonly string[]>> = {
  customers: ['FirstName', 'LastName'],
  signups: [
    signupCustomerPath('FirstName'),
    signupCustomerPath('LastName'),
    signupCardPath(ACCOUNT_NUMBER),
    signupCardPath('ExpirationDate'),
    subscriptionPath('OfferCode'),
  ],
  cards: [PAYMENT_METHOD_KEY, ACCOUNT_NUMBER, 'ExpirationDate'],
};

/** The required paths of a file of `kind` whose imported paths are `present`. */
export function requiredPaths(kind: ImportKind, present: ReadonlySet<string>): readonly string[] {
  if (kind === 'customers' && present.has(CUSTOMER_ID)) return [];
  return REQUIRED_PATHS[kind];
}

/** The paths holding payment-card data in a file of `kind`: the card number and the CVC. */
export function secretPaths(kind: ImportKind): { accountNumber: string; cvCode: string } | undefined {
  switch (kind) {
    case 'customers':
      return undefined;
    case 'signups':
      return { accountNumber: signupCardPath(ACCOUNT_NUMBER), cvCode: signupCardPath(CV_CODE) };
    case 'cards':
      return { accountNumber: ACCOUNT_NUMBER, cvCode: CV_CODE };
  }
}

/** A provisioning path, taken apart: `member` is `ProductCode`, `SubscriptionItemID` or `Fields` (then with `fieldCode`). */
export interface ItemPath {
  index: number;
  member: string;
  fieldCode?: string;
}

/** The path of member `field` of item `index`. */
export const itemPath = (index: number, field: string): string => `${ITEMS_PREFIX}[${index}].${field}`;
/** The path of provisioning value `code` of item `index`. */
export const itemFieldPath = (index: number, code: string): string => `${ITEMS_PREFIX}[${index}].Fields.${code}`;

const ITEM_PATTERN = /^subscription\.subscriptionitems\[(\d+)\]\.(.+)$/i;
const ITEM_FIELD_PATTERN = /^fields\.(.+)$/i;

/**
 * Recognises `Subscription.SubscriptionItems[i].ProductCode`,
 * `…[i].SubscriptionItemID` and `…[i].Fields.<ProductFieldCode>` in any case,
 * i from 0 to 9. Returns the canonical path, or a reason it is not one.
 */
export function parseItemPath(text: string): { path: string; item: ItemPath } | { problem: string } | undefined {
  const match = ITEM_PATTERN.exec(text);
  if (!match) return undefined;
  const [, digits = '', rest = ''] = match;
  const index = Number(digits);
  if (!/^\d$/.test(digits) || index >= MAX_SUBSCRIPTION_ITEMS) {
    return { problem: `item index ${digits} is out of range (0 to ${MAX_SUBSCRIPTION_ITEMS - 1})` };
  }
  const field = ITEM_FIELDS.find((name) => name.toLowerCase() === rest.toLowerCase());
  if (field !== undefined) return { path: itemPath(index, field), item: { index, member: field } };
  const fieldMatch = ITEM_FIELD_PATTERN.exec(rest);
  const code = fieldMatch?.[1]?.trim() ?? '';
  if (code !== '') return { path: itemFieldPath(index, code), item: { index, member: 'Fields', fieldCode: code } };
  return undefined;
}

const lowerCaseIndex = new Map(
  IMPORT_KINDS.map((kind) => [kind, new Map(KNOWN_PATHS[kind].map((known) => [known.toLowerCase(), known]))] as const),
);

/** The canonical path `text` names in a file of `kind`, or undefined when it names none. */
export function resolvePath(kind: ImportKind, text: string): string | undefined {
  if (KNOWN_PATHS[kind].includes(text)) return text;
  const folded = lowerCaseIndex.get(kind)?.get(text.toLowerCase());
  if (folded !== undefined) return folded;
  if (kind === 'signups') {
    const item = parseItemPath(text);
    if (item && 'path' in item) return item.path;
  }
  return undefined;
}

/**
 * Whether `header` names a column of any kind (or one subsync writes or
 * ignores): the reader's test of a header line before the kind is known.
 */
export function isKnownHeader(header: string): boolean {
  const text = cleanHeader(header);
  if (text === '') return false;
  if (isAnnotationHeader(text)) return true;
  return IMPORT_KINDS.some(
    (kind) => resolvePath(kind, text) !== undefined || SERVICE_OWNED_PATHS[kind].some((owned) => owned.toLowerCase() === text.toLowerCase()),
  );
}

// ---------------------------------------------------------------------------
// --map FILE

const ColumnMapSchema = z.record(
  z.string().trim().min(1, 'a column name must not be empty'),
  z.string().trim().min(1, 'a path must not be empty (use null to drop a column)').nullable(),
);

/** Reads and checks `--map FILE`: a JSON object of `{"Their Column": "Path"}`, `null` to drop a column. */
export async function loadColumnMap(file: string): Promise<ColumnMap> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new ColumnMapError(file, [`cannot read it: ${err instanceof Error ? err.message : String(err)}`], { cause: err });
  }
  let json: unknown;
  try {
    json = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch (err) {
    throw new ColumnMapError(file, [`not JSON: ${err instanceof Error ? err.message : String(err)}`], { cause: err });
  }
  const parsed = ColumnMapSchema.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) =>
      issue.path.length === 0
        ? `expected an object of {"Their Column": "Path"}: ${issue.message}`
        : `entry ${JSON.stringify(String(issue.path[0]))}: ${issue.message}`,
    );
    throw new ColumnMapError(file, problems);
  }
  return parsed.data;
}

/** What one header becomes after the map: a path to resolve, or null when the map drops it. */
function applyMap(map: ColumnMap | undefined, header: string): { target: string | null; mapKey?: string } {
  const text = cleanHeader(header);
  if (map) {
    for (const [key, value] of Object.entries(map)) {
      if (key.trim() === text) return { target: value === null ? null : value.trim(), mapKey: key };
    }
  }
  return { target: text };
}

/** A header subsync itself writes into results.csv and errors.csv (`_row`, `_error`, …). */
const isAnnotationHeader = (text: string): boolean => text.startsWith('_');

// ---------------------------------------------------------------------------
// Planning

export interface PlanInput {
  /** The file, for messages. */
  file: string;
  kind: ImportKind;
  /** The header record as read. */
  headers: string[];
  map?: ColumnMap;
  /** `--match FIELD` (customers upsert): the field must be a customer column present in the file, with LastName. */
  match?: string;
}

/**
 * Resolves the headers of a file to paths, or rejects the file with every
 * problem at once: unknown columns (with the closest known name), duplicate
 * columns, missing required columns, and map entries naming columns the file
 * lacks.
 */
export function planColumns(input: PlanInput): ColumnPlan {
  const { file, kind, headers, map } = input;
  const problems: string[] = [];
  const paths: string[] = [];
  const index = new Map<string, number>();
  const usedMapKeys = new Set<string>();

  const lastNamed = headers.findLastIndex((header) => cleanHeader(header) !== '');
  headers.forEach((header, i) => {
    const text = cleanHeader(header);
    const position = `column ${i + 1}`;
    if (text === '' && i > lastNamed) {
      // A spreadsheet's used range: an unnamed column at the end, ignored (a value under it is refused per row).
      paths.push('');
      return;
    }
    if (text === '') {
      problems.push(`unknown column "(empty)" at ${position}: every column needs a header`);
      paths.push('');
      return;
    }
    const { target, mapKey } = applyMap(map, text);
    if (mapKey !== undefined) usedMapKeys.add(mapKey);
    if (target === null || (mapKey === undefined && isAnnotationHeader(text))) {
      paths.push('');
      return;
    }
    if (mapKey === undefined && SERVICE_OWNED_PATHS[kind].some((owned) => owned.toLowerCase() === text.toLowerCase())) {
      paths.push('');
      return;
    }
    const resolved = resolvePath(kind, target);
    if (resolved === undefined) {
      const named = mapKey === undefined ? `unknown column ${showText(text)}` : `column ${showText(text)} is mapped to unknown path ${showText(target)}`;
      problems.push(`${named}${hintFor(kind, target)}`);
      paths.push('');
      return;
    }
    const first = index.get(resolved);
    if (first !== undefined) {
      problems.push(
        `duplicate column "${resolved}": ${showText(cleanHeader(headers[first] ?? ''))} (column ${first + 1}) and ${showText(text)} (${position}) both name it`,
      );
    } else {
      index.set(resolved, i);
    }
    paths.push(resolved);
  });

  if (map) {
    for (const key of Object.keys(map)) {
      if (!usedMapKeys.has(key)) problems.push(`map entry "${key}" names a column the file lacks`);
    }
  }

  const present = new Set(index.keys());
  for (const required of requiredPaths(kind, present)) {
    if (!present.has(required)) problems.push(`missing required column "${required}"`);
  }

  if (input.match !== undefined) {
    const matchPath = resolvePath('customers', input.match.trim());
    if (kind !== 'customers') {
      problems.push(`--match applies to customers files only, not ${kind}`);
    } else if (matchPath === undefined || matchPath === CUSTOMER_ID) {
      problems.push(`--match "${input.match}" is not a customer field${hintFor('customers', input.match)}`);
    } else {
      if (!present.has(matchPath)) problems.push(`missing column "${matchPath}", which --match names`);
      if (!present.has('LastName')) problems.push('missing column "LastName", which an upsert searches by (--match)');
    }
  }

  if (problems.length > 0) throw new FileRejectedError(file, [...new Set(problems)]);
  return { kind, headers, paths, index };
}

/** ` (did you mean "X"?)`, or a reason, or '' when nothing is close. */
function hintFor(kind: ImportKind, text: string): string {
  if (kind === 'signups') {
    const item = parseItemPath(text);
    if (item && 'problem' in item) return `: ${item.problem}`;
  }
  const suggestion = closestPath(kind, text);
  return suggestion === undefined ? '' : ` (did you mean "${suggestion}"?)`;
}

/** Lower case without spaces, underscores, dashes and dots: `First Name` ≈ `first_name` ≈ `FirstName`. */
const loose = (text: string): string => text.toLowerCase().replace(/[\s_.-]+/g, '');
const lastSegment = (text: string): string => text.slice(text.lastIndexOf('.') + 1);

/**
 * The known path closest to `text`: first one equal once case and separators
 * are ignored, then one whose last segment is (`FirstName` in a sign-up file →
 * `Customer.FirstName`), then the nearest by edit distance when it is close
 * (within a third of the name's length, and at least 2), where a name may also
 * be a misspelt start of the path (`Emial` → `EmailAddress`, one step dearer).
 */
export function closestPath(kind: ImportKind, text: string): string | undefined {
  const candidates = [...KNOWN_PATHS[kind]];
  if (kind === 'signups') candidates.push(...ITEM_FIELDS.map((field) => itemPath(0, field)));
  const wanted = loose(text);
  const wantedLast = loose(lastSegment(text));
  const exactLoose = candidates.find((candidate) => loose(candidate) === wanted);
  if (exactLoose !== undefined) return exactLoose;
  const bySegment = candidates.find((candidate) => loose(lastSegment(candidate)) === wantedLast);
  if (bySegment !== undefined) return bySegment;
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const whole = loose(candidate);
    const segment = loose(lastSegment(candidate));
    const distance = Math.min(
      editDistance(wanted, whole),
      candidate.includes('.') ? editDistance(wantedLast, segment) : Infinity,
      wantedLast.length >= PREFIX_MIN && segment.length > wantedLast.length
        ? editDistance(wantedLast, segment.slice(0, wantedLast.length)) + 1
        : Infinity,
    );
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  if (best === undefined) return undefined;
  const limit = Math.max(2, Math.floor(loose(lastSegment(best)).length / 3));
  return bestDistance <= limit ? best : undefined;
}

/** The shortest name taken as a possible start of a path (`Email`, not `Name`). */
const PREFIX_MIN = 5;

/** Levenshtein distance (insertions, deletions, substitutions), two rows. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

// ---------------------------------------------------------------------------
// Kind

export interface DetectKindInput {
  /** `--kind`, when given: wins. */
  explicit?: string;
  /** The inbox sub-folder the file was found in (its name or path): `customers`, `signups` or `cards`. */
  inboxFolder?: string;
  headers: string[];
  map?: ColumnMap;
  file: string;
}

const isImportKind = (value: string): value is ImportKind => (IMPORT_KINDS as readonly string[]).includes(value);

const SIGNUP_PREFIXES = ['customer.', 'creditcardinfo.', 'subscription.'];
const CUSTOMER_MARKERS = new Set(['firstname', 'lastname', CUSTOMER_ID.toLowerCase()]);

/**
 * The kind of a file: `--kind`, else the inbox sub-folder, else the (mapped)
 * headers: any `Customer.`, `CreditCardInfo.` or `Subscription.` path means
 * signups, `PaymentMethodKey` means cards, `FirstName`, `LastName` or
 * `CustomerID` means customers. Otherwise the file is rejected with how to name it.
 */
export function detectKind(input: DetectKindInput): ImportKind {
  const { explicit, inboxFolder, headers, map, file } = input;
  if (explicit !== undefined) {
    const kind = explicit.trim().toLowerCase();
    if (isImportKind(kind)) return kind;
    throw new FileRejectedError(file, [`unknown kind "${explicit}": --kind takes ${IMPORT_KINDS.join(', ')}`]);
  }
  if (inboxFolder !== undefined) {
    const folder = path.basename(inboxFolder).toLowerCase();
    if (isImportKind(folder)) return folder;
  }
  const targets = headers
    .map((header) => applyMap(map, header).target)
    .filter((target): target is string => target !== null && target !== '' && !isAnnotationHeader(target))
    .map((target) => target.toLowerCase());
  if (targets.some((target) => SIGNUP_PREFIXES.some((prefix) => target.startsWith(prefix)))) return 'signups';
  if (targets.includes(PAYMENT_METHOD_KEY.toLowerCase())) return 'cards';
  if (targets.some((target) => CUSTOMER_MARKERS.has(target))) return 'customers';
  throw new FileRejectedError(file, [
    'cannot tell from its headers whether it holds customers, signups or cards: ' +
      `name the kind with --kind ${IMPORT_KINDS.join('|')}, or drop the file in inbox/<kind>/ ` +
      `(${IMPORT_KINDS.map((kind) => `inbox/${kind}/`).join(', ')})`,
  ]);
}
