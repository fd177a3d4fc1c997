// The korvus web view. Plain JavaScript, no build step, no dependencies.
//
// Agent output is untrusted: everything an agent wrote (events, report
// markdown, file names) reaches the page through text nodes only: this file
// never parses text as markup, and links an agent wrote keep only http(s) URLs.
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
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

function notice(text) {
  document.getElementById('notice').textContent = text || '';
}

function show(...nodes) {
  const main = document.getElementById('main');
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
}

async function api(method, path, body) {
  const headers = {};
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
    throw new Error((data && data.error) || response.status + ' ' + response.statusText);
  }
  return data;
}

// A list route answers one page: {items, next}. Walks every page.
async function apiAll(path) {
  let items = [];
  let after = null;
  do {
    const query = '?limit=1000' + (after ? '&after=' + encodeURIComponent(after) : '');
    const page = await api('GET', path + query);
    items = items.concat(page.items);
    after = page.next;
  } while (after);
  return items;
}

function statusOf(session) {
  if (session.status === 'running' && session.exit_reason === 'awaiting_user') return 'awaiting_user';
  // Its run was interrupted (replica lost, or handed off): waiting for a
  // manager of its pool to resume it.
  if (session.status === 'running' && session.resume_pending) return 'resume_pending';
  // Queued: running by the status model, but no manager has claimed it.
  if (session.status === 'running' && !session.owner && !session.started_at) return 'queued';
  return session.status;
}

function statusBadge(session) {
  const s = statusOf(session);
  return el('span', { class: 'status status-' + session.status, 'data-status': s }, s);
}

// ---- markdown, rendered as DOM nodes ---------------------------------------

function safeHref(url) {
  return /^https?:\/\//i.test(url) ? url : null;
}

function inline(text) {
  const out = document.createDocumentFragment();
  const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\[[^\]]*\]\([^)\s]*\))|(\*[^*\s][^*]*\*)/;
  let rest = text;
  while (rest.length) {
    const m = pattern.exec(rest);
    if (!m) { out.append(document.createTextNode(rest)); break; }
    if (m.index) out.append(document.createTextNode(rest.slice(0, m.index)));
    const tok = m[0];
    if (m[1]) out.append(el('code', null, tok.slice(1, -1)));
    else if (m[2]) out.append(el('strong', null, tok.slice(2, -2)));
    else if (m[4]) out.append(el('em', null, tok.slice(1, -1)));
    else {
      const close = tok.indexOf('](');
      const label = tok.slice(1, close);
      const href = safeHref(tok.slice(close + 2, -1));
      if (href) out.append(el('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank' }, label));
      else out.append(document.createTextNode(tok));
    }
    rest = rest.slice(m.index + tok.length);
  }
  return out;
}

function markdown(source) {
  const root = document.createDocumentFragment();
  const lines = source.replace(/\r\n?/g, '\n').split('\n');
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) root.append(el('p', null, inline(para.join(' '))));
    para = [];
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (/^```/.test(line)) {
      flush();
      const code = [];
      for (i++; i < lines.length && !/^```/.test(lines[i]); i++) code.push(lines[i]);
      root.append(el('pre', null, el('code', null, code.join('\n'))));
      continue;
    }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    const li = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/.exec(line);
    if (h) {
      flush();
      root.append(el('h' + Math.min(6, h[1].length + 1), null, inline(h[2])));
    } else if (li) {
      if (para.length) flush();
      const tag = li[1] ? 'ol' : 'ul';
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = el(tag);
        root.append(list);
      }
      list.append(el('li', null, inline(li[2])));
    } else if (/^>\s?/.test(line)) {
      flush();
      root.append(el('blockquote', null, inline(line.replace(/^>\s?/, ''))));
    } else if (!line.trim()) {
      flush();
    } else if (list && /^\s+\S/.test(line)) {
      list.lastChild.append(document.createTextNode(' '), inline(line.trim()));
    } else {
      list = null;
      para.push(line.trim());
    }
  }
  flush();
  return root;
}

// ---- pages -----------------------------------------------------------------

// The first page of a list as a table (or a note when it is empty), and a
// button that appends the next pages on demand: a list may be long.
async function pagedTable(path, id, row, moreLabel, emptyText) {
  const first = await api('GET', path + '?limit=100');
  const table = el('table', { id }, ...first.items.map(row));
  let next = first.next;
  const more = el('button', {
    id: 'more-' + id,
    onclick: async () => {
      more.disabled = true;
      try {
        const page = await api('GET', path + '?limit=100&after=' + encodeURIComponent(next));
        table.append(...page.items.map(row));
        next = page.next;
        if (!next) more.remove();
      } catch (err) {
        more.replaceWith(el('p', { class: 'error' }, err.message));
      } finally {
        more.disabled = false;
      }
    },
  }, moreLabel);
  return [first.items.length ? table : el('p', { class: 'muted' }, emptyText), next ? more : null];
}

async function incidentsPage() {
  const row = (i) => el('tr', null,
    el('td', null, el('a', { href: '#/incidents/' + i.id, class: 'incident-link' }, i.title)),
    el('td', null, i.status),
    el('td', { class: 'muted' }, new Date(i.created_at).toLocaleString()));
  const [list, more] = await pagedTable('incidents', 'incidents', row, 'More incidents', 'No incidents yet.');
  const title = el('input', { type: 'text', id: 'new-incident-title', placeholder: 'What happened?' });
  const form = el('form', {
    onsubmit: async (e) => {
      e.preventDefault();
      const incident = await api('POST', 'incidents', { title: title.value });
      location.hash = '#/incidents/' + incident.id;
    },
  }, title, el('button', { id: 'create-incident' }, 'New incident'));
  show(el('h1', null, 'Incidents'), form, list, more);
}

async function incidentPage(id) {
  const row = (s) => el('tr', null,
    el('td', null, el('a', { href: '#/sessions/' + s.id, class: 'session-link' }, '#' + s.seq + ' ' + s.prompt)),
    el('td', null, statusBadge(s)));
  const [incident, [list, more]] = await Promise.all([
    api('GET', 'incidents/' + id),
    pagedTable('incidents/' + id + '/sessions', 'sessions', row, 'More sessions', 'No sessions yet.')]);
  const prompt = el('input', { type: 'text', id: 'new-session-prompt', placeholder: 'Ask the agent…' });
  const form = el('form', {
    onsubmit: async (e) => {
      e.preventDefault();
      const session = await api('POST', 'incidents/' + id + '/sessions', { prompt: prompt.value });
      location.hash = '#/sessions/' + session.id;
    },
  }, prompt, el('button', { id: 'create-session' }, 'Start session'));
  show(el('h1', null, incident.title), el('p', { class: 'muted' }, 'Incident ' + incident.status),
    incident.status === 'open' ? form : null, list, more);
}

// Who wrote an event, as the log says: korvus's own words are marked, and
// an agent's line never passes for them (a `system` or `user` message the
// agent printed says it is the agent's). Events of older logs say nothing.
function author(event) {
  return event.by === 'korvus' || event.by === 'agent' ? event.by : 'unmarked';
}

function describe(event) {
  switch (event.type) {
    case 'message':
      return event.role + (event.by === 'agent' && event.role !== 'assistant' ? ' (the agent\'s)' : '') + ': ' + event.text;
    case 'tool_call': return event.tool + ' ' + JSON.stringify(event.input);
    case 'tool_result': return (event.ok ? 'ok ' : 'failed ') + (typeof event.output === 'string' ? event.output : JSON.stringify(event.output));
    case 'note': return (event.by === 'korvus' ? 'korvus: ' : event.by === 'agent' ? 'agent note: ' : '') + event.text;
    case 'turn_start': case 'turn_end': return 'turn ' + event.turn + (event.interrupted ? ' (interrupted)' : '');
    default: return JSON.stringify(event);
  }
}

async function sessionPage(id) {
  const status = el('span', { id: 'status' });
  const controls = el('div', { id: 'controls' });
  const events = el('ul', { id: 'events' });
  const report = el('div', { id: 'report' }, el('p', { class: 'muted' }, 'No report yet.'));
  const artifacts = el('div', { id: 'artifacts' });
  show(el('h1', null, 'Session'), el('p', null, 'Status: ', status, ' ',
    el('a', { href: base + 'api/sessions/' + id + '/log', download: '' }, 'turn log')),
  controls, el('h2', null, 'Events'), events, el('h2', null, 'Report'), report,
  el('h2', null, 'Artifacts'), artifacts);
  let lastId = null;
  const mine = page;

  const refresh = async (row) => {
    const session = row || await api('GET', 'sessions/' + id);
    // Attempts are numbered inside a revision: above 1, the run was
    // resumed after its replica was lost or handed it off.
    const attempt = session.attempt > 1
      ? el('span', { id: 'attempt', class: 'muted' }, ' · revision ' + session.revision + ', attempt ' + session.attempt)
      : null;
    status.replaceChildren(statusBadge(session), ...(attempt ? [attempt] : []));
    controls.replaceChildren(...controlsFor(session));
    await Promise.all([loadReport(id, report), loadArtifacts(id, artifacts)]);
  };
  const follow = () => {
    if (mine !== page) return;
    if (stream) stream.close();
    const url = base + 'api/sessions/' + id + '/events' + (lastId === null ? '' : '?after=' + encodeURIComponent(lastId));
    const source = new EventSource(url);
    stream = source;
    source.onmessage = (e) => {
      lastId = e.lastEventId;
      const event = JSON.parse(e.data);
      events.append(el('li', { 'data-type': event.type, 'data-by': author(event), class: 'by-' + author(event) },
        el('span', { class: 'kind' }, event.type), describe(event)));
      events.scrollTop = events.scrollHeight;
    };
    source.addEventListener('end', (e) => {
      source.close();
      if (stream === source) stream = null;
      const row = JSON.parse(e.data);
      if (mine !== page) return;
      refresh(row).catch((err) => notice(err.message));
      if (statusOf(row) === 'running') setTimeout(follow, 1000);
    });
    // The server could not read the log: reconnect from the last id.
    source.addEventListener('failure', () => {
      source.close();
      if (stream === source) stream = null;
      setTimeout(follow, 2000);
    });
  };
  const act = (path, body) => async () => {
    try {
      const row = await api('POST', 'sessions/' + id + '/' + path, body && body());
      if (mine !== page) return;
      notice('');
      await refresh(row);
      if (path !== 'cancel') follow();
    } catch (err) { notice(err.message); }
  };
  const controlsFor = (session) => {
    const s = statusOf(session);
    if (s === 'running' || s === 'queued') return [el('button', { id: 'cancel', onclick: act('cancel') }, 'Cancel')];
    const message = el('input', { type: 'text', id: 'message', placeholder: s === 'awaiting_user' ? 'Reply…' : 'Follow-up…' });
    const path = s === 'awaiting_user' ? 'messages' : 'reopen';
    const label = s === 'awaiting_user' ? 'Reply' : 'Reopen';
    const buttons = [message, el('button', { id: path === 'messages' ? 'reply' : 'reopen', onclick: act(path, () => ({ message: message.value })) }, label)];
    if (s === 'awaiting_user') buttons.push(el('button', { id: 'cancel', onclick: act('cancel') }, 'Cancel'));
    return [el('form', { onsubmit: (e) => e.preventDefault() }, ...buttons)];
  };
  await refresh();
  follow();
}

async function loadReport(id, target) {
  const reports = await apiAll('sessions/' + id + '/reports');
  const newest = reports.filter((r) => r.markdown_key).pop();
  if (!newest) return;
  const response = await fetch(base + 'api/sessions/' + id + '/reports/' + newest.revision, { credentials: 'same-origin' });
  if (!response.ok) return;
  const text = await response.text();
  target.replaceChildren(
    el('p', { class: 'muted', 'data-revision': String(newest.revision) }, 'Revision ' + newest.revision + ' · ' + newest.exit_reason),
    markdown(text));
}

async function loadArtifacts(id, target) {
  const list = await apiAll('sessions/' + id + '/artifacts');
  const rows = list.map((a) => el('tr', null,
    el('td', null, el('a', { href: base + 'api/artifacts/' + a.id + '/content', download: '', class: 'artifact-link' }, a.path)),
    el('td', null, a.kind), el('td', null, 'rev ' + a.revision), el('td', { class: 'muted' }, a.size_bytes + ' B')));
  target.replaceChildren(rows.length ? el('table', null, ...rows) : el('p', { class: 'muted' }, 'No artifacts yet.'));
}

// ---- routing and login -----------------------------------------------------

async function route() {
  page += 1;
  if (stream) { stream.close(); stream = null; }
  const hash = location.hash.replace(/^#/, '');
  const parts = hash.split('/').filter(Boolean);
  try {
    if (parts[0] === 'incidents' && parts[1]) await incidentPage(encodeURIComponent(parts[1]));
    else if (parts[0] === 'sessions' && parts[1]) await sessionPage(encodeURIComponent(parts[1]));
    else await incidentsPage();
  } catch (err) {
    show(el('p', { class: 'error' }, err.message));
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
    show(el('p', null, 'Open the address korvus serve printed (it carries the token).'));
    return false;
  }
  return true; // no guard in front of this router: nothing to exchange
}

window.addEventListener('DOMContentLoaded', async () => {
  window.korvusMarkdown = markdown;
  if (await login()) {
    window.addEventListener('hashchange', route);
    await route();
  }
});
