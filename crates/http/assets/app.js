// The korvus web view. Plain JavaScript, no build step, no dependencies:
// `markdown.js` (the report renderer), this file (helpers, the lists,
// routing and login) and `session.js` (the session page).
//
// Agent output is untrusted: everything an agent wrote (events, report
// markdown, file names) reaches the page through text nodes only: these
// files never parse text as markup, and links an agent wrote keep only
// http(s) URLs.
'use strict';

const base = location.pathname.replace(/[^/]*$/, '');
let csrf = null;
let stream = null;
// Bumped on every navigation: timers and answers of a page left behind
// must not touch the page shown now.
let page = 0;

// ---- helpers ---------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function notice(text) {
  document.getElementById('notice').textContent = text || '';
}

function show(title, ...nodes) {
  document.title = title ? title + ' · korvus' : 'korvus';
  const main = document.getElementById('main');
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
}

// A breadcrumb: [label, href] pairs, the last one the page itself.
function breadcrumb(...steps) {
  const items = steps.map(([label, href], i) => el('li', null,
    i === steps.length - 1 ? el('span', { 'aria-current': 'page' }, label) : el('a', { href }, label)));
  return el('nav', { 'aria-label': 'Breadcrumb', class: 'breadcrumb' }, el('ol', null, ...items));
}

class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body, extra) {
  const headers = Object.assign({}, extra || {});
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (csrf && method !== 'GET') headers['X-Korvus-Csrf'] = csrf;
  const response = await fetch(base + 'api/' + path, {
    method,
    headers,
    credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!response.ok) {
    throw new ApiError((data && data.error) || response.status + ' ' + response.statusText,
      response.status, data && data.code);
  }
  return data;
}

// A list route answers one page: {items, next}. Walks every page.
async function apiAll(path) {
  let items = [];
  let after = null;
  do {
    const query = '?limit=1000' + (after ? '&after=' + encodeURIComponent(after) : '');
    const one = await api('GET', path + query);
    items = items.concat(one.items);
    after = one.next;
  } while (after);
  return items;
}

// Runs `tick` every `ms` while page `mine` (the navigation that started
// it) is shown.
function every(mine, ms, tick) {
  const timer = setInterval(() => {
    if (mine !== page) { clearInterval(timer); return; }
    tick();
  }, ms);
}

// ---- times -----------------------------------------------------------------

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : '—';
}

function clock(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : '';
}

function duration(ms) {
  if (!(ms >= 0)) return '—';
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min ' + (s % 60) + ' s';
  const h = Math.floor(m / 60);
  return h + ' h ' + (m % 60) + ' min';
}

function timeEl(iso) {
  return iso ? el('time', { datetime: iso, title: iso }, when(iso)) : el('span', { class: 'muted' }, '—');
}

// ---- status ----------------------------------------------------------------

const LABELS = {
  queued: 'queued',
  running: 'running',
  awaiting_user: 'waiting for you',
  budget_reached: 'paused at its budget',
  resume_pending: 'resume pending',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
};

function statusOf(session) {
  if (session.status === 'running' && session.exit_reason === 'awaiting_user') return 'awaiting_user';
  // Paused at its budget: idle, like a session waiting for the user.
  if (session.status === 'running' && session.exit_reason === 'budget_reached') return 'budget_reached';
  // Its run was interrupted (replica lost, or handed off): waiting for a
  // manager of its pool to resume it.
  if (session.status === 'running' && session.resume_pending) return 'resume_pending';
  // Queued: running by the status model, but no manager has claimed it.
  if (session.status === 'running' && !session.owner && !session.started_at) return 'queued';
  return session.status;
}

function statusBadge(session) {
  const s = statusOf(session);
  return el('span', { class: 'status status-' + s, 'data-status': s }, LABELS[s] || s);
}

// Shown beside a field: what is wrong with it, in words.
function fieldError(id) {
  return el('p', { class: 'field-error', id, role: 'alert' });
}

function setError(node, input, text) {
  node.textContent = text || '';
  if (text) input.setAttribute('aria-invalid', 'true');
  else input.removeAttribute('aria-invalid');
}

// A form whose one required text field must not be blank: `submit` gets
// the trimmed text; an empty field or a refused call says why beside it.
function textForm(opts) {
  const input = el(opts.multiline ? 'textarea' : 'input', {
    id: opts.id, name: opts.id, type: opts.multiline ? null : 'text', rows: opts.multiline ? 3 : null,
    'aria-describedby': opts.id + '-error', autocomplete: 'off',
  });
  const error = fieldError(opts.id + '-error');
  const button = el('button', { id: opts.button, type: 'submit' }, opts.action);
  const form = el('form', {
    class: 'stack', novalidate: true,
    onsubmit: async (e) => {
      e.preventDefault();
      const text = input.value.trim();
      if (!text) { setError(error, input, opts.empty); input.focus(); return; }
      setError(error, input, '');
      // One request at a time: a double click sends one.
      button.disabled = true;
      try {
        await opts.submit(text);
      } catch (err) {
        setError(error, input, err.message);
      } finally {
        button.disabled = false;
      }
    },
  },
  el('label', { for: opts.id }, opts.label),
  el('div', { class: 'row' }, input, ...(opts.extra || []), button),
  error);
  return form;
}

// ---- lists -----------------------------------------------------------------

// The first page of a list as a table (or a note when it is empty), and a
// button that appends the next pages on demand: a list may be long. While
// only the first page is shown, `refresh` re-reads it (the lists follow
// what other clients create).
async function pagedTable(path, id, caption, head, row, moreLabel, emptyText) {
  const first = await api('GET', path + '?limit=100');
  const body = el('tbody', null, ...first.items.map(row));
  const table = el('table', { id }, el('caption', { class: 'visually-hidden' }, caption),
    el('thead', null, el('tr', null, ...head.map((h) => el('th', { scope: 'col' }, h)))), body);
  const empty = el('p', { class: 'muted' }, emptyText);
  const holder = el('div', { class: 'table-scroll' }, first.items.length ? table : empty);
  let next = first.next;
  let extended = false;
  const more = el('button', {
    id: 'more-' + id, type: 'button',
    onclick: async () => {
      more.disabled = true;
      try {
        const one = await api('GET', path + '?limit=100&after=' + encodeURIComponent(next));
        body.append(...one.items.map(row));
        extended = true;
        next = one.next;
        if (!next) more.remove();
      } catch (err) {
        more.replaceWith(el('p', { class: 'error' }, err.message));
      } finally {
        more.disabled = false;
      }
    },
  }, moreLabel);
  // Re-rendered only when the page changed, and never under the keyboard
  // focus (a focused link rebuilt would drop it).
  let shown = JSON.stringify(first.items);
  const refresh = async () => {
    if (extended || holder.contains(document.activeElement)) return;
    const now = await api('GET', path + '?limit=100');
    const seen = JSON.stringify(now.items);
    if (seen === shown) return;
    shown = seen;
    body.replaceChildren(...now.items.map(row));
    holder.replaceChildren(now.items.length ? table : empty);
    if (now.next && !next) holder.after(more);
    next = now.next;
  };
  return { nodes: [holder, next ? more : null], refresh };
}

async function incidentsPage(mine) {
  const row = (i) => el('tr', null,
    el('td', null, el('a', { href: '#/incidents/' + i.id, class: 'incident-link' }, i.title)),
    el('td', null, el('span', { class: 'incident-' + i.status }, i.status)),
    el('td', { class: 'muted' }, timeEl(i.created_at)));
  const list = await pagedTable('incidents', 'incidents', 'Incidents', ['Title', 'Status', 'Opened'],
    row, 'More incidents', 'No incidents yet.');
  if (mine !== page) return;
  const form = textForm({
    id: 'new-incident-title', label: 'New incident: what happened?', button: 'create-incident',
    action: 'Open incident', empty: 'Give the incident a title.',
    submit: async (title) => {
      const incident = await api('POST', 'incidents', { title });
      location.hash = '#/incidents/' + incident.id;
    },
  });
  show('Incidents', breadcrumb(['Incidents', '#/']), el('h1', null, 'Incidents'), form, ...list.nodes);
  every(mine, 5000, () => list.refresh().catch(() => {}));
}

async function incidentPage(id, mine) {
  const row = (s) => el('tr', null,
    el('td', null, el('a', { href: '#/sessions/' + s.id, class: 'session-link' }, '#' + s.seq)),
    el('td', { class: 'prompt-cell' }, s.prompt.length > 140 ? s.prompt.slice(0, 140) + '…' : s.prompt),
    el('td', null, statusBadge(s)),
    el('td', { class: 'muted' }, timeEl(s.created_at)));
  const [incident, list] = await Promise.all([
    api('GET', 'incidents/' + id),
    pagedTable('incidents/' + id + '/sessions', 'sessions', 'Sessions', ['Session', 'Prompt', 'Status', 'Created'],
      row, 'More sessions', 'No sessions yet.')]);
  if (mine !== page) return;
  // One key per form shown: a retried or doubled submit makes one session.
  const idempotency = crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random();
  const priority = el('select', { id: 'new-session-priority', 'aria-label': 'Priority' },
    ...[9, 8, 7, 6, 5, 4, 3, 2, 1].map((p) => el('option', { value: p, selected: p === 5 }, 'priority ' + p)));
  const form = textForm({
    id: 'new-session-prompt', label: 'New session: what should the agent look into?', multiline: true,
    button: 'create-session', action: 'Start session', empty: 'Write a prompt for the agent.', extra: [priority],
    submit: async (prompt) => {
      const session = await api('POST', 'incidents/' + id + '/sessions', { prompt, priority: Number(priority.value) },
        { 'Idempotency-Key': idempotency });
      location.hash = '#/sessions/' + session.id;
    },
  });
  const closeError = el('p', { class: 'field-error', role: 'alert' });
  const close = el('button', {
    id: 'close-incident', type: 'button', class: 'secondary',
    onclick: async () => {
      try {
        await api('POST', 'incidents/' + id + '/close');
        await route();
      } catch (err) { closeError.textContent = err.message; }
    },
  }, 'Close incident');
  const open = incident.status === 'open';
  show(incident.title,
    breadcrumb(['Incidents', '#/'], [incident.title, '#/incidents/' + id]),
    el('h1', null, incident.title),
    el('p', { class: 'muted', id: 'incident-status' }, 'Incident ' + incident.status + ' · opened ', timeEl(incident.created_at),
      open ? ' ' : null, open ? close : null),
    closeError,
    open ? form : el('p', { class: 'muted' }, 'Closed: no new sessions. Its sessions can still be read.'),
    el('h2', null, 'Sessions'), ...list.nodes);
  every(mine, 2000, () => list.refresh().catch(() => {}));
}

// ---- routing and login -----------------------------------------------------

async function route() {
  page += 1;
  const mine = page;
  if (stream) { stream.close(); stream = null; }
  notice('');
  const hash = location.hash.replace(/^#/, '');
  const parts = hash.split('/').filter(Boolean);
  try {
    if (parts[0] === 'incidents' && parts[1]) await incidentPage(encodeURIComponent(parts[1]), mine);
    else if (parts[0] === 'sessions' && parts[1]) await sessionPage(encodeURIComponent(parts[1]), mine);
    else await incidentsPage(mine);
  } catch (err) {
    // A page left behind says nothing.
    if (mine === page) show('Error', el('p', { class: 'error' }, err.message));
  }
}

async function login() {
  const m = /[#&]token=([^&]+)/.exec(location.hash);
  if (m) {
    history.replaceState(null, '', base + '#/');
    const response = await fetch(base + 'api/login', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { Authorization: 'Bearer ' + decodeURIComponent(m[1]) },
    });
    if (!response.ok) { notice('The token was refused.'); return false; }
    csrf = (await response.json()).csrf;
    return true;
  }
  const response = await fetch(base + 'api/csrf', { credentials: 'same-origin' });
  if (response.ok) { csrf = (await response.json()).csrf; return true; }
  if (response.status === 401) {
    show('Sign in', el('p', null, 'Open the address korvus serve printed (it carries the token).'));
    return false;
  }
  return true; // no guard in front of this router: nothing to exchange
}

window.addEventListener('DOMContentLoaded', async () => {
  window.korvusMarkdown = markdown;
  show(null, el('p', { class: 'muted' }, 'Loading…'));
  if (await login()) {
    window.addEventListener('hashchange', route);
    await route();
  }
});
