/**
 * A deterministic, realistic customer population for the sandbox, the tests
 * and the benchmarks. The real service holds up to millions of customers whose
 * names are skewed: a few surnames shared by thousands, a long tail of rare
 * ones, first names that contain common surnames (Kathleen, Colleen, Ashlee
 * contain "lee"). A search planner measured against a near-empty sandbox
 * learns nothing; against this population it sees the real shape.
 *
 * `personAt(seed, index)` depends on nothing but its arguments, so a test can
 * call indexes below N the "existing" customers and indexes from N on the
 * "new" ones: every index has its own email address, so the two never collide.
 */
import { SIGNUP_CUSTOMER_FIELDS } from '../api/schemas/index.js';
import type { SeedCustomer } from './seed.js';

/**
 * The very common surnames, most common first: together about a quarter of
 * all people, Smith about 1%.
 */
export const COMMON_SURNAMES: readonly string[] = [
  'Smith', 'Johnson', 'Williams', 'Brown', 'Jones', 'Garcia', 'Miller', 'Davis', 'Rodriguez', 'Martinez', 'Lee', 'Nguyen',
  'Kim', 'Müller', 'Wilson', 'Anderson', 'Taylor', 'Thomas', 'Moore', 'Martin', 'Jackson', 'White', 'Lopez', 'Gonzalez',
  'Harris', 'Clark', 'Lewis', 'Robinson', 'Walker', 'Young', 'Patel', 'Schmidt',
];

/** The middle band, most common first: together about another quarter of people, a few thousand each in a million. */
export const MID_SURNAMES: readonly string[] = [
  'Hernandez', 'Wright', 'King', 'Scott', 'Green', 'Baker', 'Adams', 'Nelson', 'Hill', 'Ramirez', 'Campbell', 'Mitchell',
  'Roberts', 'Carter', 'Phillips', 'Evans', 'Turner', 'Torres', 'Parker', 'Collins', 'Edwards', 'Stewart', 'Flores', 'Morris',
  'Murphy', 'Cook', 'Rogers', 'Morgan', 'Peterson', 'Cooper', 'Reed', 'Bailey', 'Bell', 'Gomez', 'Kelly', 'Howard', 'Ward',
  'Cox', 'Diaz', 'Richardson', 'Wood', 'Watson', 'Brooks', 'Bennett', 'Gray', 'James', 'Reyes', 'Cruz', 'Hughes', 'Price',
  'Myers', 'Long', 'Foster', 'Sanders', 'Ross', 'Morales', 'Powell', 'Sullivan', 'Russell', 'Ortiz', 'Jenkins', 'Gutierrez',
  'Perry', 'Butler', 'Barnes', 'Fisher', 'Henderson', 'Coleman', 'Simmons', 'Patterson', 'Jordan', 'Reynolds', 'Hamilton',
  'Graham', 'Wallace', 'Chen', 'Wang', 'Li', 'Zhang', 'Liu', 'Singh', 'Kumar', 'Sato', 'Suzuki', 'Tanaka', 'Watanabe', 'Park',
  'Choi', 'Tran', 'Pham', 'Schneider', 'Fischer', 'Weber', 'Meyer', 'Wagner', 'Becker', 'Schulz', 'Hoffmann', 'Schäfer',
  'Koch', 'Dubois', 'Durand', 'Lefèvre', 'Moreau', 'Laurent', 'Bernard', 'Rossi', 'Russo', 'Ferrari', 'Esposito', 'Bianchi',
  'Romano', 'Silva', 'Santos', 'Oliveira', 'Souza', 'Pereira', 'Costa', 'Fernández', 'González', 'Sánchez', 'Pérez',
  'Jiménez', "O'Brien", "O'Connor", 'Murray', 'Kowalski', 'Nowak', 'Wiśniewski', 'Novák', 'Jensen', 'Nielsen', 'Hansen',
  'Johansson', 'Andersson', 'Larsen', 'Yılmaz', 'Kaya', 'Ivanov', 'Popescu', 'Leeson', 'Ashley', 'Lindqvist', 'Okafor',
  'Mensah', 'Haddad', 'Cohen', 'Levi',
];

/** First names, most common first. Some contain common surnames (Kathleen, Colleen, Ashlee: "lee"). */
export const FIRST_NAMES: readonly string[] = [
  'James', 'Mary', 'John', 'Patricia', 'Robert', 'Jennifer', 'Michael', 'Linda', 'William', 'Elizabeth', 'David', 'Barbara',
  'Richard', 'Susan', 'Joseph', 'Jessica', 'Thomas', 'Sarah', 'Charles', 'Karen', 'Christopher', 'Lisa', 'Daniel', 'Nancy',
  'Matthew', 'Betty', 'Anthony', 'Margaret', 'Mark', 'Sandra', 'Donald', 'Ashley', 'Steven', 'Kimberly', 'Paul', 'Emily',
  'Andrew', 'Donna', 'Joshua', 'Michelle', 'Kenneth', 'Carol', 'Kevin', 'Amanda', 'Brian', 'Dorothy', 'George', 'Melissa',
  'Timothy', 'Deborah', 'Ronald', 'Stephanie', 'Edward', 'Rebecca', 'Jason', 'Sharon', 'Jeffrey', 'Laura', 'Ryan', 'Cynthia',
  'Jacob', 'Kathleen', 'Gary', 'Amy', 'Nicholas', 'Angela', 'Eric', 'Shirley', 'Jonathan', 'Anna', 'Stephen', 'Brenda',
  'Larry', 'Pamela', 'Justin', 'Emma', 'Scott', 'Nicole', 'Brandon', 'Helen', 'Benjamin', 'Samantha', 'Samuel', 'Katherine',
  'Gregory', 'Christine', 'Alexander', 'Debra', 'Frank', 'Rachel', 'Patrick', 'Carolyn', 'Raymond', 'Janet', 'Jack',
  'Catherine', 'Dennis', 'Maria', 'Jerry', 'Heather', 'Tyler', 'Diane', 'Aaron', 'Ruth', 'José', 'Julie', 'Adam', 'Olivia',
  'Nathan', 'Joyce', 'Henry', 'Virginia', 'Douglas', 'Victoria', 'Zachary', 'Kelly', 'Peter', 'Lauren', 'Kyle', 'Christina',
  'Noah', 'Joan', 'Ethan', 'Evelyn', 'Jeremy', 'Judith', 'Walter', 'Megan', 'Christian', 'Andrea', 'Keith', 'Cheryl', 'Roger',
  'Hannah', 'Terry', 'Jacqueline', 'Austin', 'Martha', 'Sean', 'Gloria', 'Gerald', 'Teresa', 'Carl', 'Ann', 'Harold', 'Sara',
  'Dylan', 'Madison', 'Arthur', 'Frances', 'Lawrence', 'Kathryn', 'Jordan', 'Janice', 'Jesse', 'Jean', 'Bryan', 'Abigail',
  'Billy', 'Alice', 'Bruce', 'Judy', 'Gabriel', 'Sophia', 'Joe', 'Grace', 'Logan', 'Denise', 'Alan', 'Amber', 'Juan', 'Doris',
  'Albert', 'Marilyn', 'Willie', 'Danielle', 'Elijah', 'Beverly', 'Wayne', 'Isabella', 'Randy', 'Theresa', 'Vincent', 'Diana',
  'Mason', 'Natalie', 'Roy', 'Brittany', 'Ralph', 'Charlotte', 'Bobby', 'Marie', 'Russell', 'Kayla', 'Bradley', 'Alexis',
  'Philip', 'Lori', 'Eugene', 'Colleen', 'Lee', 'Ashlee', 'Leela', 'Zoë', 'Wei', 'Mei', 'Hiroshi', 'Yuki', 'Minh', 'Linh',
  'Ji-woo', 'Seo-yeon', 'Priya', 'Arjun', 'Aisha', 'Omar', 'Fatima', 'Mohammed', 'Jürgen', 'Jörg', 'Søren', 'Björn', 'Åsa',
  'Renée', 'Chloé', 'Amélie', 'Héloïse', 'Inês', 'João', 'Siobhán', 'Seán', 'Niamh', 'Łucja', 'Zdeněk', 'Ayşe', 'Nuño',
  'Ngozi', 'Chidi', 'Kwame', 'Leilani', 'Lucía', 'Sofía', 'Mateo', 'Andrés', 'François', 'Anaïs', 'Maëlle', 'Noémie', 'Zoé',
];

/** How many generated rare surnames the long tail holds. */
export const RARE_SURNAME_COUNT = 40_000;

/** The share of people in each surname band. */
export const SURNAME_SHARES = { common: 0.25, mid: 0.25, rare: 0.5 } as const;

/**
 * The long tail: deterministic syllable combinations (Brailkor, Dreisk,
 * Vöthman…), all distinct and none equal to a common or mid surname, so that
 * at a million people most are shared by a handful to a few dozen.
 */
export const RARE_SURNAMES: readonly string[] = generateRareSurnames(RARE_SURNAME_COUNT);

const PLACES: readonly Place[] = [
  { city: 'New York', state: 'NY', postalCode: '10001', countryCode: 'USA', dial: '+1 212' },
  { city: 'Chicago', state: 'IL', postalCode: '60601', countryCode: 'USA', dial: '+1 312' },
  { city: 'Houston', state: 'TX', postalCode: '77002', countryCode: 'USA', dial: '+1 713' },
  { city: 'Los Angeles', state: 'CA', postalCode: '90012', countryCode: 'USA', dial: '+1 213' },
  { city: 'Seattle', state: 'WA', postalCode: '98101', countryCode: 'USA', dial: '+1 206' },
  { city: 'Toronto', state: 'ON', postalCode: 'M5H 2N2', countryCode: 'CAN', dial: '+1 416' },
  { city: 'London', state: '', postalCode: 'NW1 6XE', countryCode: 'GBR', dial: '+44 20' },
  { city: 'Manchester', state: '', postalCode: 'M1 1AE', countryCode: 'GBR', dial: '+44 161' },
  { city: 'Dublin', state: '', postalCode: 'D02 X285', countryCode: 'IRL', dial: '+353 1' },
  { city: 'Paris', state: 'Île-de-France', postalCode: '75002', countryCode: 'FRA', dial: '+33 1' },
  { city: 'Lyon', state: '', postalCode: '69002', countryCode: 'FRA', dial: '+33 4' },
  { city: 'München', state: 'Bayern', postalCode: '80802', countryCode: 'DEU', dial: '+49 89' },
  { city: 'Berlin', state: '', postalCode: '10115', countryCode: 'DEU', dial: '+49 30' },
  { city: 'Zürich', state: 'ZH', postalCode: '8001', countryCode: 'CHE', dial: '+41 44' },
  { city: 'Madrid', state: '', postalCode: '28013', countryCode: 'ESP', dial: '+34 91' },
  { city: 'Milano', state: 'MI', postalCode: '20121', countryCode: 'ITA', dial: '+39 02' },
  { city: 'São Paulo', state: 'SP', postalCode: '01310-200', countryCode: 'BRA', dial: '+55 11' },
  { city: 'Ciudad de México', state: 'CDMX', postalCode: '06000', countryCode: 'MEX', dial: '+52 55' },
  { city: 'Gdańsk', state: '', postalCode: '80-827', countryCode: 'POL', dial: '+48 58' },
  { city: 'Malmö', state: '', postalCode: '211 34', countryCode: 'SWE', dial: '+46 40' },
  { city: 'København', state: '', postalCode: '1050', countryCode: 'DNK', dial: '+45 33' },
  { city: 'İstanbul', state: '', postalCode: '34110', countryCode: 'TUR', dial: '+90 212' },
  { city: 'Seoul', state: '', postalCode: '04524', countryCode: 'KOR', dial: '+82 2' },
  { city: 'Hà Nội', state: '', postalCode: '100000', countryCode: 'VNM', dial: '+84 24' },
  { city: 'Osaka', state: '', postalCode: '530-0001', countryCode: 'JPN', dial: '+81 6' },
  { city: 'Sydney', state: 'NSW', postalCode: '2000', countryCode: 'AUS', dial: '+61 2' },
  { city: 'Lagos', state: '', postalCode: '100001', countryCode: 'NGA', dial: '+234 1' },
  { city: 'Mumbai', state: 'MH', postalCode: '400001', countryCode: 'IND', dial: '+91 22' },
];
const STREETS = [
  'Main Street', 'High Street', 'Oak Avenue', 'Maple Drive', 'Church Road', 'Station Road', 'Park Lane', 'Elm Street',
  'Rue de la Paix', 'Königstraße', 'Grafton Street', 'Avenida Paulista', 'ul. Długa', 'Drottninggatan', 'Baker Street',
  "Church's Lane", 'Via Roma', 'Calle Mayor', 'Bahnhofstraße', 'Sunset Boulevard', 'Queen Street', 'King Street',
];
const COMPANIES = [
  'Acme Corp', 'Globex', 'Initech', 'Umbrella Ltd', 'Stark Industries', 'Wayne Enterprises', 'Hooli', 'Vandelay Industries',
  'Atelier Lefèvre', 'Müller & Söhne GmbH', 'Nordic Trading AB', 'Café Olé', 'Soylent', 'Tyrell Corp', 'Cyberdyne Systems',
  "O'Neill & Partners", 'Blue Sky Ltd', 'Pied Piper', 'Wonka Industries', 'Oceanic Airlines', 'Monarch Solutions', 'Gringotts',
];
const NAME_PREFIXES = ['Mr', 'Ms', 'Mrs', 'Dr', 'Mx'];
const NAME_SUFFIXES = ['Jr', 'Sr', 'III'];
const TITLES = ['Engineer', 'Accountant', 'Director', 'Nurse', 'Teacher', 'Manager', 'Consultant', 'Designer', 'Analyst'];
const EMAIL_DOMAINS = ['example.com', 'example.org', 'example.net', 'mail.example', 'example.co.uk', 'example.de', 'example.fr'];

interface Place {
  city: string;
  state: string;
  postalCode: string;
  countryCode: string;
  /** Country and area prefix of phone numbers there. */
  dial: string;
}

/** Cumulative weights: a draw u in [0, 1) picks the first rank whose bound exceeds it. */
const SURNAMES: readonly string[] = [...COMMON_SURNAMES, ...MID_SURNAMES, ...RARE_SURNAMES];
const SURNAME_BOUNDS = cumulative([
  ...bandWeights(COMMON_SURNAMES.length, SURNAME_SHARES.common, 30),
  ...bandWeights(MID_SURNAMES.length, SURNAME_SHARES.mid, 20),
  ...bandWeights(RARE_SURNAMES.length, SURNAME_SHARES.rare, 2000),
]);
const FIRST_NAME_BOUNDS = cumulative(bandWeights(FIRST_NAMES.length, 1, 10));

/** The person at `index` of the population drawn with `seed`: the same arguments, the same person. */
export function personAt(seed: number, index: number): SeedCustomer {
  const draw = new Draws(seed, index);
  const FirstName = pick(FIRST_NAMES, FIRST_NAME_BOUNDS, draw.next());
  const LastName = pick(SURNAMES, SURNAME_BOUNDS, draw.next());
  const place = oneOf(PLACES, draw.next());
  const company = draw.next() < 0.2 ? oneOf(COMPANIES, draw.next()) : '';
  return {
    FirstName,
    MiddleName: draw.next() < 0.25 ? pick(FIRST_NAMES, FIRST_NAME_BOUNDS, draw.next()) : '',
    LastName,
    NamePrefix: draw.next() < 0.3 ? oneOf(NAME_PREFIXES, draw.next()) : '',
    NameSuffix: draw.next() < 0.02 ? oneOf(NAME_SUFFIXES, draw.next()) : '',
    Title: draw.next() < 0.15 ? oneOf(TITLES, draw.next()) : '',
    Company: company,
    EmailAddress: flat(asciiOf(FirstName), '.', asciiOf(LastName), '.', index, '@', oneOf(EMAIL_DOMAINS, draw.next())),
    AddressLine1: addressLine(draw.next(), draw.next()),
    AddressLine2: draw.next() < 0.15 ? apartment(draw.next()) : '',
    City: draw.next() < 0.9 ? place.city : '',
    StateProvince: place.state,
    PostalCode: draw.next() < 0.9 ? place.postalCode : '',
    CountryCode: draw.next() < 0.95 ? place.countryCode : '',
    HomeNumber: draw.next() < 0.3 ? phone(place, draw) : '',
    MobileNumber: draw.next() < 0.7 ? phone(place, draw) : null,
    WorkNumber: company !== '' && draw.next() < 0.5 ? phone(place, draw) : '',
    FAXNumber: '',
    WebPageURL: draw.next() < 0.03 ? flat('https://www.example.com/~', asciiOf(LastName)) : '',
  };
}

/** The people at indexes `from` (inclusive) to `to` (exclusive), in index order. */
export function* population(seed: number, from: number, to: number): Generator<SeedCustomer> {
  for (let index = from; index < to; index++) yield personAt(seed, index);
}

/** The header of a customers CSV holding population people: every customer field but Password. */
export const POPULATION_CSV_HEADER: readonly string[] = SIGNUP_CUSTOMER_FIELDS;

/** One CSV record per person of the slice, columns as {@link POPULATION_CSV_HEADER}; a null MobileNumber is empty. */
export function* populationCsvRows(seed: number, from: number, to: number): Generator<string[]> {
  for (const person of population(seed, from, to)) yield SIGNUP_CUSTOMER_FIELDS.map((field) => person[field] ?? '');
}

/**
 * A small seeded generator per person (mulberry32 from a hash of seed and
 * index), so a person does not depend on who was drawn before.
 */
class Draws {
  private state: number;

  constructor(seed: number, index: number) {
    const low = index >>> 0;
    const high = Math.floor(index / 0x1_0000_0000) >>> 0;
    this.state = mix(mix(seed >>> 0) ^ mix(low + 0x9e3779b9) ^ Math.imul(high, 0x85ebca6b));
  }

  /** A number in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    return mulberry32Output(this.state);
  }
}

/** The mulberry32 sequence from one state: for building the tables once. */
function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    return mulberry32Output(state);
  };
}

function mulberry32Output(state: number): number {
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

/** murmur3's finaliser: spreads neighbouring indexes over unrelated states. */
function mix(value: number): number {
  let h = value >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** Zipf–Mandelbrot weights 1/(rank + flattening) for one band, scaled to sum to `share`. */
function bandWeights(count: number, share: number, flattening: number): number[] {
  const raw = Array.from({ length: count }, (_, i) => 1 / (i + 1 + flattening));
  const total = raw.reduce((sum, w) => sum + w, 0);
  return raw.map((w) => (w / total) * share);
}

function cumulative(weights: readonly number[]): Float64Array {
  const bounds = new Float64Array(weights.length);
  let sum = 0;
  weights.forEach((w, i) => {
    sum += w;
    bounds[i] = sum;
  });
  return bounds;
}

/** The first entry whose cumulative bound exceeds u (binary search). */
function pick(names: readonly string[], bounds: Float64Array, u: number): string {
  const target = u * (bounds[bounds.length - 1] ?? 1);
  let lo = 0;
  let hi = bounds.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((bounds[mid] ?? 0) > target) hi = mid;
    else lo = mid + 1;
  }
  return names[lo] ?? names[0] ?? '';
}

function oneOf<T>(items: readonly T[], u: number): T {
  const item = items[Math.floor(u * items.length)] ?? items[0];
  if (item === undefined) throw new RangeError('oneOf needs a non-empty list');
  return item;
}

// Address lines come from a few thousand combinations, built once each and
// shared by every person who draws them: a million people do not hold a
// million copies.
const HOUSE_NUMBERS = 250;
const addressLines: Array<string | undefined> = [];
function addressLine(u: number, v: number): string {
  const key = Math.floor(u * HOUSE_NUMBERS) * STREETS.length + Math.floor(v * STREETS.length);
  return (addressLines[key] ??= `${Math.floor(key / STREETS.length) + 1} ${oneOf(STREETS, v)}`);
}

const apartments: Array<string | undefined> = [];
function apartment(u: number): string {
  const n = Math.floor(u * 80) + 1;
  return (apartments[n] ??= `Apt ${n}`);
}

function phone(place: Place, draw: Draws): string {
  const digits = Math.floor(draw.next() * 9_000_000) + 1_000_000;
  return flat(place.dial, ' ', Math.floor(digits / 10_000), ' ', String(digits % 10_000).padStart(4, '0'));
}

/**
 * Concatenates into one flat string. A template literal or `+` leaves a tree
 * of partial strings behind each result, several times the size of its
 * characters: over a million people, hundreds of megabytes.
 */
function flat(...parts: Array<string | number>): string {
  return parts.join('');
}

// Names come from the tables above, so their ASCII forms are few: computed once.
const asciiForms = new Map<string, string>();
/** A name as the local part of an email address: ASCII letters and digits only (Müller → muller, Søren → soren). */
export function asciiOf(name: string): string {
  let ascii = asciiForms.get(name);
  if (ascii === undefined) {
    ascii = name
      .normalize('NFD')
      .replace(/[\u0300-\u036f]/g, '')
      .replace(/ø/g, 'o').replace(/Ø/g, 'O').replace(/ł/g, 'l').replace(/Ł/g, 'L').replace(/ß/g, 'ss').replace(/ı/g, 'i')
      .toLowerCase()
      .replace(/[^a-z0-9]/g, '');
    if (ascii === '') ascii = 'x';
    asciiForms.set(name, ascii);
  }
  return ascii;
}

/**
 * Builds the rare surnames from syllables with a fixed generator: the same
 * list on every run and machine, distinct, none equal to a listed surname.
 */
function generateRareSurnames(count: number): string[] {
  const onsets = ['b', 'c', 'd', 'f', 'g', 'h', 'k', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v', 'w', 'z', 'br', 'ch', 'dr', 'gr', 'kr', 'pl', 'st', 'th', 'tr', 'sh', ''];
  const nuclei = ['a', 'e', 'i', 'o', 'u', 'ai', 'ei', 'ou', 'ee', 'oa', 'y', 'ä', 'é', 'ö', 'a', 'e', 'o'];
  const codas = ['', '', 'n', 'r', 's', 'l', 'm', 'nd', 'rt', 'ck', 'sk', 'ng', 'th', 'x'];
  const endings = ['', '', '', '', '', '', '', 'son', 'berg', 'ski', 'ez', 'ova', 'ley', 'man', 'sen', 'ton', 'lee', 'ini', 'ard'];
  const taken = new Set([...COMMON_SURNAMES, ...MID_SURNAMES].map((name) => name.toLowerCase()));
  const next = mulberry32(0x5eed);
  const names: string[] = [];
  while (names.length < count) {
    const syllables = next() < 0.75 ? 2 : 3;
    let text = '';
    for (let s = 0; s < syllables; s++) text += oneOf(onsets, next()) + oneOf(nuclei, next()) + oneOf(codas, next());
    text += oneOf(endings, next());
    if (text.length < 4 || taken.has(text)) continue;
    taken.add(text);
    names.push(text.charAt(0).toUpperCase() + text.slice(1));
  }
  return names;
}
