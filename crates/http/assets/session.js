// The session page of the korvus web view (helpers in app.js): a summary
// to judge the session by, the conversation, the controls, each revision
// with its report and files, and the event timeline — following the
// session live (its event stream, and its row every 2 s).
'use strict';

// Who wrote an event, as the log says: korvus's own words are marked, and
// an agent's line never passes for them (a `system` or `user` message the
// agent printed says it is the agent's). Events of older logs say nothing.
function author(event) {
  return event.by === 'korvus' || event.by === 'agent' ? event.by : 'unmarked';
}

function show_json(value) {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function describe(event) {
  switch (event.type) {
    case 'message':
      return event.role + (event.by === 'agent' && event.role !== 'assistant' ? ' (the agent\'s)' : '') + ': ' + event.text;
    case 'tool_call': return event.tool + ' ' + show_json(event.input);
    case 'tool_result': return (event.ok ? 'ok ' : 'failed ') + show_json(event.output);
    case 'note': return (event.by === 'korvus' ? 'korvus: ' : event.by === 'agent' ? 'agent note: ' : '') + event.text;
    case 'turn_start': case 'turn_end': return 'turn ' + event.turn + (event.interrupted ? ' (interrupted)' : '');
    case 'usage': return event.input_tokens + ' input, ' + event.output_tokens + ' output tokens (as the agent reported)';
    case 'metered_usage': return (event.unmetered ? 'at least ' : '') + event.input_tokens + ' input, ' + event.output_tokens + ' output tokens (measured by korvus' + (event.unmetered ? ', not whole' : '') + (event.model ? ', ' + event.model : '') + ')';
    default: return JSON.stringify(event);
  }
}

// Failures and the agent's stderr stand out in the timeline.
function failure(event) {
  return (event.type === 'tool_result' && !event.ok)
    || (event.type === 'turn_end' && event.interrupted)
    || (event.type === 'note' && event.by !== 'korvus' && /^stderr: /.test(event.text || ''));
}

// A korvus note opening a resumed attempt: "attempt N of revision R: …".
function attemptOf(event) {
  if (event.type !== 'note' || event.by !== 'korvus') return null;
  const m = /^attempt (\d+) of revision (\d+): resumed/.exec(event.text || '');
  return m ? { attempt: Number(m[1]), revision: Number(m[2]) } : null;
}

function counterText(c) {
  const n = (x, one, many) => Number(x).toLocaleString() + ' ' + (Number(x) === 1 ? one : many);
  return n(c.turns, 'turn', 'turns') + ' · ' + n(c.tool_calls, 'tool call', 'tool calls') + ' · '
    + Number(c.input_tokens).toLocaleString() + ' input / ' + Number(c.output_tokens).toLocaleString() + ' output tokens';
}

// One budget: what was spent of each limit set, and what is left.
function budgetLine(scope, b) {
  const l = b.limits, sp = b.spent;
  const tokens = sp.input_tokens + sp.output_tokens;
  const parts = [];
  const of = (spent, limit, what) => { if (limit !== null) parts.push(Number(spent).toLocaleString() + ' of ' + Number(limit).toLocaleString() + ' ' + what); };
  of(tokens, l.tokens, 'tokens');
  of(sp.input_tokens, l.input_tokens, 'input tokens');
  of(sp.output_tokens, l.output_tokens, 'output tokens');
  of(sp.cost_micros, l.cost_micros, 'cost (millionths)');
  of(Math.floor(sp.wall_ms / 1000), l.wall_ms === null ? null : Math.floor(l.wall_ms / 1000), 's of runs');
  if (!parts.length) parts.push('no limit, ' + tokens.toLocaleString() + ' tokens spent');
  return scope + ': ' + parts.join(', ') + (b.reached ? ' (reached)' : '');
}

function ordinal(n) {
  const s = ['th', 'st', 'nd', 'rd'];
  const v = n % 100;
  return n + (s[(v - 20) % 10] || s[v] || s[0]);
}

const TERMINAL = ['completed', 'failed', 'cancelled'];
// Idle: no run until someone answers it or raises its budget.
const IDLE = ['awaiting_user', 'budget_reached'];
const FILTERS = [['all', 'All events'], ['messages', 'Messages'], ['tools', 'Tool calls'],
  ['notes', 'Notes'], ['korvus', 'korvus\'s notes'], ['failures', 'Failures and stderr']];

async function sessionPage(id, mine) {
  let session = await api('GET', 'sessions/' + id);
  const incident = await api('GET', 'incidents/' + session.incident_id).catch(() => null);
  if (mine !== page) return;
  const incidentTitle = incident ? incident.title : 'Incident';
  const title = 'Session #' + session.seq;

  const state = {
    reports: [], artifacts: [], key: null, asked: 0, busy: false,
    lastRevision: null, calls: new Map(), starts: new Map(), attempts: new Map(), lastId: null,
  };
  const badge = el('span', { id: 'status' });
  const summary = el('dl', { id: 'summary', class: 'summary' });
  const messages = el('ol', { id: 'messages', class: 'messages' });
  const controls = el('div', { id: 'controls' });
  const revisions = el('div', { id: 'revisions' });
  const events = el('ul', { id: 'events', 'data-filter': 'all' });
  const box = el('div', { id: 'events-box', role: 'log', tabindex: '0', 'aria-label': 'Events of this session' }, events);
  const filter = el('select', {
    id: 'event-filter',
    onchange: () => { events.dataset.filter = filter.value; },
  }, ...FILTERS.map(([v, label]) => el('option', { value: v }, label)));

  show(title + ' · ' + incidentTitle,
    breadcrumb(['Incidents', '#/'], [incidentTitle, '#/incidents/' + session.incident_id], [title, '#/sessions/' + id]),
    el('h1', null, title, ' ', badge),
    summary,
    el('h2', null, 'Conversation'), messages,
    controls,
    el('h2', null, 'Revisions'), revisions,
    el('h2', null, 'Events'),
    el('div', { class: 'row' }, el('label', { for: 'event-filter' }, 'Show'), filter,
      el('a', { href: base + 'api/sessions/' + id + '/log', download: '', class: 'push' }, 'Download the turn log')),
    box);

  // ---- summary --------------------------------------------------------
  const durationEl = el('span', { id: 'duration' });
  const tick = () => {
    const s = statusOf(session);
    const start = session.started_at;
    if (!start) { durationEl.textContent = '—'; return; }
    const end = session.ended_at ? Date.parse(session.ended_at) : (s === 'running' ? Date.now() : null);
    durationEl.textContent = end ? duration(end - Date.parse(start)) + (session.ended_at ? '' : ' so far') : '—';
  };
  const renderSummary = () => {
    const s = statusOf(session);
    badge.replaceChildren(statusBadge(session));
    const rows = [];
    const item = (term, ...detail) => rows.push(el('div', null, el('dt', null, term), el('dd', null, ...detail)));
    const reason = session.exit_reason && session.exit_reason !== session.status && !IDLE.includes(s)
      ? el('span', { id: 'exit-reason', class: 'muted' }, ' · ' + session.exit_reason) : null;
    item('Status', statusBadge(session), reason);
    if (session.cause) item('Cause', el('span', { id: 'cause', class: 'cause' }, session.cause));
    if (s === 'queued' || s === 'resume_pending') {
      const place = session.queue_position
        ? 'about ' + ordinal(session.queue_position) + ' in line (an estimate: claims also weigh each key\'s share)'
        : 'in line';
      item('Queue', el('span', { id: 'queue' }, 'priority ' + session.admission.priority + ' · ' + place));
    }
    item('Prompt', el('p', { id: 'prompt', class: 'prompt' }, session.prompt));
    item('Times', el('span', { id: 'times' }, 'created ', timeEl(session.created_at), ' · started ',
      timeEl(session.started_at), ' · ended ', timeEl(session.ended_at)));
    item('Duration', durationEl);
    item('Usage', el('span', { id: 'counters' }, counterText(session.counters)));
    const budgets = session.budget || {};
    const budgetText = [['session', budgets.session], ['incident', budgets.incident]]
      .filter(([, b]) => b).map(([scope, b]) => budgetLine(scope, b)).join(' · ');
    if (budgetText) item('Budget', el('span', { id: 'budget' }, budgetText));
    item('Revision', el('span', { id: 'revision' }, 'revision ' + session.revision + ', attempt ' + session.attempt
      + (session.attempt > 1 ? ' (resumed after its run was interrupted)' : '')));
    summary.replaceChildren(...rows);
    tick();
  };

  // ---- controls -------------------------------------------------------
  const act = async (path, body) => {
    const row = await api('POST', 'sessions/' + id + '/' + path, body);
    if (mine !== page) return;
    notice('');
    await refresh(row);
    if (path !== 'cancel') follow();
  };
  // Cancel asks first; the focus follows the question and comes back.
  const cancelButton = () => {
    const holder = el('div', { class: 'row' });
    const ask = el('button', {
      id: 'cancel', type: 'button', class: 'danger',
      onclick: () => {
        const yes = el('button', {
          id: 'cancel-confirm', type: 'button', class: 'danger',
          onclick: () => { yes.disabled = true; act('cancel').catch((e) => { yes.disabled = false; notice(e.message); }); },
        }, 'Yes, cancel');
        holder.replaceChildren(
          el('span', { role: 'alert' }, 'Cancel this run? What it made so far is kept.'), yes,
          el('button', { id: 'cancel-keep', type: 'button', onclick: () => { holder.replaceChildren(ask); ask.focus(); } }, 'Keep it running'));
        yes.focus();
      },
    }, 'Cancel');
    holder.append(ask);
    return holder;
  };
  const renderControls = () => {
    const s = statusOf(session);
    const parts = [];
    if (s === 'awaiting_user') {
      parts.push(textForm({
        id: 'message', label: 'The agent waits for your answer', multiline: true, button: 'reply', action: 'Reply',
        empty: 'Write a message first.', submit: (message) => act('messages', { message }),
      }));
    } else if (s === 'budget_reached') {
      parts.push(textForm({
        id: 'budget-tokens', label: 'Its budget is spent: raise its token budget to', button: 'raise', action: 'Raise',
        empty: 'Give a number of tokens first.',
        submit: (text) => {
          const tokens = Number(text);
          if (!Number.isSafeInteger(tokens) || tokens < 0) throw new Error('A whole number of tokens, please.');
          // Its other limits stay as they are: a set replaces them all.
          const limits = (session.budget && session.budget.session && session.budget.session.limits) || {};
          return act('budget', Object.assign({}, limits, { tokens }));
        },
      }));
    } else if (TERMINAL.includes(s)) {
      const neverRan = session.revision === 1 && !session.started_at;
      parts.push(neverRan
        ? el('p', { class: 'muted', id: 'never-ran' }, 'This session ended before its agent ran: there is nothing to reopen. Start a new session in its incident instead.')
        : textForm({
          id: 'message', label: 'Reopen with a follow-up', multiline: true, button: 'reopen', action: 'Reopen',
          empty: 'Write a message first.', submit: (message) => act('reopen', { message }),
        }));
    }
    if (!TERMINAL.includes(s)) parts.push(cancelButton());
    controls.replaceChildren(...parts);
  };

  // ---- revisions ------------------------------------------------------
  const revisionOf = (epoch) => {
    if (epoch === undefined || epoch === null) return state.reports.length ? state.reports[0].revision : session.revision;
    for (const r of state.reports) if (epoch <= r.fence) return r.revision;
    return session.revision;
  };
  const loadReport = async (report, target, newest) => {
    if (!report.markdown_key) {
      target.replaceChildren(el('p', { class: 'muted' }, 'This revision left no report' + (report.detail ? ': ' + report.detail : '.')));
      return;
    }
    const response = await fetch(base + 'api/sessions/' + id + '/reports/' + report.revision, { credentials: 'same-origin' });
    if (!response.ok) { target.replaceChildren(el('p', { class: 'error' }, 'The report could not be read.')); return; }
    const text = await response.text();
    target.replaceChildren(
      el('p', { class: 'muted', 'data-revision': String(report.revision) }, 'Revision ' + report.revision + ' · ' + report.exit_reason
        + (newest ? '' : ' (an earlier revision)')),
      markdown(text, 4));
  };
  const artifactTable = (revision) => {
    const list = state.artifacts.filter((a) => a.revision === revision);
    if (!list.length) return el('p', { class: 'muted' }, 'No files.');
    return el('div', { class: 'table-scroll' }, el('table', { class: 'artifacts' },
      el('caption', { class: 'visually-hidden' }, 'Files of revision ' + revision),
      el('thead', null, el('tr', null, el('th', { scope: 'col' }, 'File'), el('th', { scope: 'col' }, 'Kind'), el('th', { scope: 'col' }, 'Size'))),
      el('tbody', null, ...list.map((a) => el('tr', null,
        el('td', null, el('a', { href: base + 'api/artifacts/' + a.id + '/content', download: '', class: 'artifact-link' }, a.path)),
        el('td', null, a.kind), el('td', { class: 'muted' }, Number(a.size_bytes).toLocaleString() + ' B'))))));
  };
  const headline = (r, report) => {
    const attempts = r === session.revision ? session.attempt : (state.attempts.get(r) || 1);
    const start = r === session.revision && session.started_at ? session.started_at : state.starts.get(r);
    const end = report ? report.created_at : null;
    const parts = ['Revision ' + r];
    if (report) parts.push(report.exit_reason);
    else parts.push(LABELS[statusOf(session)] || statusOf(session));
    if (start) parts.push(clock(start) + (end ? '–' + clock(end) + ' (' + duration(Date.parse(end) - Date.parse(start)) + ')' : ''));
    parts.push(counterText(report ? report.counters : session.counters));
    if (attempts > 1) parts.push(attempts + ' attempts');
    return parts.join(' · ');
  };
  const renderRevisions = () => {
    const byRevision = new Map(state.reports.map((r) => [r.revision, r]));
    const newest = session.revision;
    const items = [];
    for (let r = newest; r >= 1; r--) {
      const report = byRevision.get(r);
      const body = el('div', { class: 'report', id: r === newest ? 'report' : 'report-' + r });
      const head = el('summary', { class: 'revision-head' }, headline(r, report));
      const details = el('details', { class: 'revision', 'data-revision': String(r), open: r === newest },
        head, el('h3', { class: 'visually-hidden' }, 'Revision ' + r), body,
        el('h4', null, 'Files'), artifactTable(r));
      if (!report) {
        body.append(el('p', { class: 'muted', id: 'revision-running' },
          'Revision ' + r + ' ' + (LABELS[statusOf(session)] || statusOf(session)) + ': its report lands when it ends.'));
      } else if (r === newest) {
        loadReport(report, body, true).catch((e) => notice(e.message));
      } else {
        body.append(el('p', { class: 'muted' }, 'Loading…'));
        let loaded = false;
        details.addEventListener('toggle', () => {
          if (details.open && !loaded) { loaded = true; loadReport(report, body, false).catch((e) => notice(e.message)); }
        });
      }
      items.push(details);
    }
    revisions.replaceChildren(...items);
  };

  // ---- refresh --------------------------------------------------------
  // Answers are numbered: one that comes back after a newer one is
  // dropped, so the page never steps back to an older row. The controls
  // and revisions are rebuilt only when the session moved on (status,
  // revision, attempt, end), and the key is kept only once they are.
  const refresh = async (row) => {
    const asked = ++state.asked;
    const now = row && row.id && row.cause !== undefined ? row : await api('GET', 'sessions/' + id);
    if (mine !== page || asked !== state.asked) return;
    session = now;
    renderSummary();
    const key = statusOf(session) + '/' + session.revision + '/' + session.attempt + '/' + session.ended_at;
    if (key === state.key) return;
    const [reports, artifacts] = await Promise.all([apiAll('sessions/' + id + '/reports'), apiAll('sessions/' + id + '/artifacts')]);
    if (mine !== page || asked !== state.asked) return;
    state.reports = reports.sort((a, b) => a.revision - b.revision);
    state.artifacts = artifacts;
    renderControls();
    renderRevisions();
    state.key = key;
  };

  // ---- events ---------------------------------------------------------
  const append = (event) => {
    const r = revisionOf(event.epoch);
    if (r !== state.lastRevision) {
      state.lastRevision = r;
      events.append(el('li', { class: 'sep' }, 'Revision ' + r));
    }
    if (event.at && !state.starts.has(r)) state.starts.set(r, event.at);
    const attempt = attemptOf(event);
    if (attempt) state.attempts.set(attempt.revision, Math.max(attempt.attempt, state.attempts.get(attempt.revision) || 1));
    const who = author(event);
    const classes = ['by-' + who];
    if (failure(event)) classes.push('failure');
    if (attempt) classes.push('attempt');
    const li = el('li', { 'data-type': event.type, 'data-by': who, class: classes.join(' ') },
      el('span', { class: 'at' }, event.at ? el('time', { datetime: event.at, title: event.at }, clock(event.at)) : ''),
      el('span', { class: 'kind' }, event.type), describe(event));
    // A tool call and its result point at each other: the call says how
    // it ended, the result which call it answers.
    if (event.type === 'tool_call') state.calls.set(event.call_id, { li, tool: event.tool });
    if (event.type === 'tool_result') {
      const call = state.calls.get(event.call_id);
      if (call) {
        call.li.classList.add('paired');
        call.li.append(el('span', { class: event.ok ? 'result ok' : 'result failed' }, event.ok ? ' → ok' : ' → failed'));
        li.insertBefore(el('span', { class: 'pair' }, '↳ ' + call.tool + ' '), li.lastChild);
      }
    }
    events.append(li);
    if (event.type === 'message' && event.role === 'user' && event.by !== 'agent') {
      messages.append(el('li', null, el('span', { class: 'muted' }, 'revision ' + r + ' · ', timeEl(event.at)),
        el('p', { class: 'prompt' }, event.text)));
    }
  };
  const follow = () => {
    if (mine !== page) return;
    if (stream) stream.close();
    const url = base + 'api/sessions/' + id + '/events' + (state.lastId === null ? '' : '?after=' + encodeURIComponent(state.lastId));
    const source = new EventSource(url);
    stream = source;
    source.onmessage = (e) => {
      state.lastId = e.lastEventId;
      const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
      append(JSON.parse(e.data));
      if (stick) box.scrollTop = box.scrollHeight;
    };
    source.addEventListener('end', (e) => {
      source.close();
      if (stream === source) stream = null;
      const row = JSON.parse(e.data);
      if (mine !== page) return;
      // No row (the server could not read it): the poll takes over.
      if (!row.id) return;
      refresh(row).catch((err) => notice(err.message));
      if (!TERMINAL.includes(statusOf(row)) && !IDLE.includes(statusOf(row))) setTimeout(follow, 1000);
    });
    // Closed for good (the server refused a reconnect): the poll follows
    // again when the session runs.
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED && stream === source) stream = null;
    };
    // The server could not read the log: reconnect from the last id.
    source.addEventListener('failure', () => {
      source.close();
      if (stream === source) stream = null;
      setTimeout(follow, 2000);
    });
  };

  await refresh(session);
  follow();
  every(mine, 1000, tick);
  // The row, every 2 s while the session is active (a queued session that
  // starts, a run that ends, live counters), every 10 s once it ended or
  // waits (a reopen or answer from elsewhere); never two reads at once.
  let quiet = 0;
  every(mine, 2000, () => {
    const active = !TERMINAL.includes(statusOf(session)) && !IDLE.includes(statusOf(session));
    if (state.busy || (!active && ++quiet % 5 !== 0)) return;
    state.busy = true;
    refresh().then(() => {
      if (!stream && !TERMINAL.includes(statusOf(session)) && !IDLE.includes(statusOf(session))) follow();
    }).catch(() => {}).finally(() => { state.busy = false; });
  });
}
