/**
 * Server-rendered HTML with escaping by construction: every value put into
 * an `html` template is escaped, unless it is itself the result of `html`
 * (a fragment built the same way). There is no other way to make a `Html`,
 * so text from a CSV file, an API message or a URL cannot become markup.
 */

const ESCAPES: Readonly<Record<string, string>> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text made safe for HTML content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

/** A fragment of markup built by {@link html}. */
export class Html {
  readonly #markup: string;
  constructor(markup: string, key: symbol) {
    if (key !== BUILDER) throw new Error('Html is only made by the html template');
    this.#markup = markup;
  }
  toString(): string {
    return this.#markup;
  }
}
const BUILDER = Symbol('html');

/** What may go into a template: text (escaped), numbers, fragments, lists of them; nothing for undefined, null and false. */
export type HtmlValue = Html | string | number | boolean | null | undefined | readonly HtmlValue[];

function render(value: HtmlValue): string {
  if (value instanceof Html) return value.toString();
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === undefined || value === null || value === false) return '';
  return escapeHtml(String(value));
}

/** A template literal whose interpolations are escaped. */
export function html(strings: TemplateStringsArray, ...values: readonly HtmlValue[]): Html {
  let markup = strings[0] ?? '';
  values.forEach((value, i) => {
    markup += render(value) + (strings[i + 1] ?? '');
  });
  return new Html(markup, BUILDER);
}

/** The dashboard's sections, for the navigation bar. */
const NAV: ReadonlyArray<{ href: string; label: string }> = [
  { href: '/', label: 'Imports' },
  { href: '/history', label: 'History' },
  { href: '/exports', label: 'Exports' },
  { href: '/queue-health', label: 'Queue health' },
  { href: '/audit', label: 'Audit' },
  { href: '/queues', label: 'Jobs (bull-board)' },
  { href: '/metrics', label: 'Metrics' },
];

export interface PageOptions {
  title: string;
  body: Html;
  /** The CSRF token for forms (the log-out button); absent on the login page. */
  csrf?: string;
  /** Show the log-out button (a token is configured). */
  loggedIn?: boolean;
  /** Who is looking, shown in the header: `alice (operator)`. */
  user?: string;
  /** A message shown above the body (the outcome of the last action). */
  notice?: string;
  noticeKind?: 'ok' | 'error';
}

/** A whole page: head, navigation, notice, body. Its script and styles are same-origin files (the CSP allows nothing inline). */
export function page(options: PageOptions): string {
  const logout = options.loggedIn && options.csrf !== undefined
    ? html`<form method="post" action="/logout" class="logout"><input type="hidden" name="_csrf" value="${options.csrf}"><button type="submit">Log out</button></form>`
    : undefined;
  // Every page but the login form: a search of rows (a GET: a search changes nothing).
  const search = options.csrf === undefined
    ? undefined
    : html`<form method="get" action="/find" class="header-search" role="search"><input type="search" name="q" placeholder="Find rows: email, name or id" aria-label="find rows"><button type="submit">Find</button></form>`;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${options.title} · subsync</title>
<link rel="stylesheet" href="/assets/dashboard.css">
<script src="/assets/dashboard.js" defer></script>
</head>
<body>
<header><nav><strong>subsync</strong>${NAV.map((item) => html` <a href="${item.href}">${item.label}</a>`)}</nav>${search}${options.user ? html`<span class="who" data-user>${options.user}</span>` : undefined}${logout}</header>
<main>
<h1>${options.title}</h1>
${options.notice ? html`<p class="notice ${options.noticeKind ?? 'ok'}" role="status">${options.notice}</p>` : undefined}
${options.body}
</main>
</body>
</html>
`.toString();
}
