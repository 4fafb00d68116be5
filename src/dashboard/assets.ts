/**
 * The dashboard's only script and stylesheet, served as same-origin files so
 * the pages' Content-Security-Policy can forbid inline script and style.
 * No build step: plain JavaScript that runs as written in any current browser.
 */

/**
 * Live progress: an element with `data-poll="<url>"` is refreshed from that
 * JSON route every 2 s. The route answers `{ imports: [{ importId, fields:
 * { name: text }, progress: { value, max } }] }`; each `[data-import=id]
 * [data-field=name]` gets the text (as text, never as markup). A page whose
 * `data-reload-when` state is reached reloads, so a detail page shows its
 * new rows once the import finishes. Also: "select all" checkboxes.
 */
export const DASHBOARD_JS = `'use strict';
(function () {
  function apply(item) {
    var selector = '[data-import="' + CSS.escape(item.importId) + '"]';
    document.querySelectorAll(selector).forEach(function (scope) {
      Object.keys(item.fields).forEach(function (name) {
        scope.querySelectorAll('[data-field="' + name + '"]').forEach(function (el) { el.textContent = item.fields[name]; });
      });
      scope.querySelectorAll('progress[data-field-progress]').forEach(function (el) {
        el.max = Math.max(1, item.progress.max);
        el.value = item.progress.value;
      });
    });
    var reload = document.querySelector('[data-reload-when]');
    if (reload && reload.getAttribute('data-import') === item.importId) {
      var from = reload.getAttribute('data-state');
      var when = reload.getAttribute('data-reload-when');
      // Several states may be named: the page reloads when the import enters one of them.
      if (from !== item.fields.state && when.split(' ').indexOf(item.fields.state) >= 0) location.reload();
    }
  }
  function poll(el) {
    var url = el.getAttribute('data-poll');
    var tick = function () {
      fetch(url, { headers: { accept: 'application/json' }, credentials: 'same-origin' })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (body) { if (body && body.imports) body.imports.forEach(apply); })
        .catch(function () {})
        .then(function () { setTimeout(tick, 2000); });
    };
    setTimeout(tick, 2000);
  }
  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('[data-poll]').forEach(poll);
    document.querySelectorAll('button[data-confirm]').forEach(function (button) {
      button.form.addEventListener('submit', function (event) {
        if (!window.confirm(button.getAttribute('data-confirm'))) event.preventDefault();
      });
    });
    document.querySelectorAll('input[data-select-all]').forEach(function (all) {
      all.addEventListener('change', function () {
        document.querySelectorAll('input[name="rows"]').forEach(function (box) { box.checked = all.checked; });
      });
    });
  });
})();
`;

export const DASHBOARD_CSS = `
:root { color-scheme: light; --line: #d9dde3; --muted: #5b6470; --ok: #1d7a3a; --bad: #b3261e; --warn: #8a5a00; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1c2128; background: #f6f7f9; }
header { display: flex; justify-content: space-between; align-items: center; padding: .6rem 1.2rem; background: #1c2733; color: #fff; }
header a { color: #cfe3ff; margin-left: 1rem; text-decoration: none; }
header a:hover { text-decoration: underline; }
header form.logout { margin: 0; }
ul.details { margin: 0; padding-left: 1.1rem; }
details.schedule-form { margin: .8rem 0; }
details.schedule-form form { margin-top: .6rem; }
details.schedule-form label { display: inline-block; margin: 0 1.2rem .6rem 0; }
header .who { margin-left: auto; margin-right: 1rem; color: #cfe3ff; font-size: .9em; }
main { padding: 1rem 1.2rem 3rem; max-width: 1400px; }
h1 { font-size: 1.4rem; margin: .4rem 0 1rem; }
h2 { font-size: 1.1rem; margin: 1.6rem 0 .6rem; }
table { border-collapse: collapse; background: #fff; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
.muted { color: var(--muted); }
.notice { padding: .6rem .8rem; border-radius: 4px; border: 1px solid; }
.notice.ok { background: #e8f5ec; border-color: #a9d8b7; color: var(--ok); }
.notice.error { background: #fdecea; border-color: #f0b4ae; color: var(--bad); }
.status { display: inline-block; padding: 0 .4rem; border-radius: 3px; font-size: 12px; background: #eef1f5; }
.status.invalid, .status.failed { background: #fdecea; color: var(--bad); }
.status.needs-review { background: #fff4db; color: var(--warn); }
.status.created, .status.updated, .status.signed-up, .status.reconciled { background: #e8f5ec; color: var(--ok); }
.status.unchanged, .status.exists, .status.duplicate { background: #eef1f5; color: var(--muted); }
.status.cancelled { background: #f1ecfa; color: #5b3f8c; }
.run { display: inline-block; padding: 0 .4rem; border-radius: 3px; font-weight: 600; background: #e8f5ec; color: var(--ok); }
.run.paused { background: #fff4db; color: var(--warn); }
.run.cancelling, .run.cancelled { background: #f1ecfa; color: #5b3f8c; }
form.control { margin: 0; }
button.cancel { border-color: var(--bad); color: var(--bad); }
.problem { color: var(--bad); max-width: 32rem; }
progress { width: 8rem; vertical-align: middle; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; background: #fff; padding: .8rem; border: 1px solid var(--line); }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
details summary { cursor: pointer; }
details table { margin-top: .3rem; font-size: 12.5px; }
.actions { margin: .6rem 0; display: flex; gap: .5rem; }
button { font: inherit; padding: .3rem .7rem; border: 1px solid #8892a0; border-radius: 4px; background: #fff; cursor: pointer; }
button.primary { background: #1f5fbf; border-color: #1f5fbf; color: #fff; }
form.edit { background: #fff; border: 1px solid var(--line); padding: 1rem; max-width: 52rem; }
form.edit label { display: grid; grid-template-columns: 18rem 1fr; gap: .6rem; align-items: center; margin: .35rem 0; }
form.edit label.error span.name { color: var(--bad); font-weight: 600; }
form.edit input, form.edit textarea { font: inherit; padding: .25rem .4rem; border: 1px solid #aab2bd; border-radius: 3px; width: 100%; }
form.edit input[readonly] { background: #eef1f5; }
fieldset { border: 1px solid var(--line); margin: 1rem 0; }
.hint { font-size: 12px; color: var(--muted); }
ul.errors { color: var(--bad); }
form.login { background: #fff; border: 1px solid var(--line); padding: 1rem; max-width: 26rem; }
form.login input { width: 100%; padding: .35rem; margin: .4rem 0 .8rem; font: inherit; }
header nav { flex: 1; }
form.header-search { margin: 0 1rem; display: flex; gap: .3rem; }
form.header-search input { font: inherit; padding: .2rem .4rem; border: 1px solid #8892a0; border-radius: 3px; width: 18rem; }
form.header-search button { padding: .2rem .6rem; }
form.find { display: flex; gap: .5rem; max-width: 44rem; }
form.find input { flex: 1; font: inherit; padding: .35rem .5rem; border: 1px solid #aab2bd; border-radius: 3px; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; }
figure.chart { margin: 0; background: #fff; border: 1px solid var(--line); padding: .5rem; }
figure.chart svg { display: block; max-width: 100%; height: auto; }
figure.chart figcaption { font-size: 12px; color: var(--muted); text-align: center; }
.state { display: inline-block; padding: 0 .4rem; border-radius: 3px; font-size: 12px; background: #eef1f5; white-space: nowrap; }
.state.running { background: #e6effc; color: #1f5fbf; }
.state.finished { background: #e8f5ec; color: var(--ok); }
.state.finished-with-failures, .state.cancelled { background: #fdecea; color: var(--bad); }
.state.paused { background: #fff4db; color: var(--warn); }
.filters a[aria-current] { font-weight: 600; color: inherit; text-decoration: none; }
.pager a { margin-right: .8rem; }
`;
