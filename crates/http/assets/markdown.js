// Markdown, rendered as DOM nodes: the subset reports use (headings,
// paragraphs, lists, quotes, fenced code, tables, inline code, emphasis,
// links). Agent text reaches the page through text nodes only — nothing
// here parses text as markup — and links keep only http(s) URLs.
'use strict';

function mdEl(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

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
    if (m[1]) out.append(mdEl('code', null, tok.slice(1, -1)));
    else if (m[2]) out.append(mdEl('strong', null, tok.slice(2, -2)));
    else if (m[4]) out.append(mdEl('em', null, tok.slice(1, -1)));
    else {
      const close = tok.indexOf('](');
      const label = tok.slice(1, close);
      const href = safeHref(tok.slice(close + 2, -1));
      if (href) out.append(mdEl('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank' }, label));
      else out.append(document.createTextNode(tok));
    }
    rest = rest.slice(m.index + tok.length);
  }
  return out;
}

// The cells of a table row `| a | b |` (outer pipes optional; `\|` is a
// pipe inside a cell).
function cells(line) {
  let body = line.trim();
  if (body.startsWith('|')) body = body.slice(1);
  if (body.endsWith('|') && !body.endsWith('\\|')) body = body.slice(0, -1);
  return body.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function table(header, rule, rows) {
  const align = cells(rule).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : null));
  const cell = (tag, text, i) => {
    const c = mdEl(tag, tag === 'th' ? { scope: 'col' } : null, inline(text));
    if (align[i]) c.className = 'align-' + align[i];
    return c;
  };
  const head = mdEl('thead', null, mdEl('tr', null, ...cells(header).map((t, i) => cell('th', t, i))));
  const width = cells(header).length;
  const body = mdEl('tbody', null, ...rows.map((r) => {
    const cs = cells(r);
    while (cs.length < width) cs.push('');
    return mdEl('tr', null, ...cs.slice(0, width).map((t, i) => cell('td', t, i)));
  }));
  return mdEl('div', { class: 'table-scroll' }, mdEl('table', { class: 'md-table' }, head, body));
}

// `source` as a fragment. `level` is the heading level a `#` heading gets
// (a report shown under an h2 nests its headings from h3), at most h6.
function markdown(source, level) {
  const top = level || 2;
  const root = document.createDocumentFragment();
  const lines = source.replace(/\r\n?/g, '\n').split('\n');
  let para = [];
  let list = null;
  const flush = () => {
    if (para.length) root.append(mdEl('p', null, inline(para.join(' '))));
    para = [];
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (/^```/.test(line)) {
      flush();
      const code = [];
      for (i++; i < lines.length && !/^```/.test(lines[i]); i++) code.push(lines[i]);
      root.append(mdEl('pre', null, mdEl('code', null, code.join('\n'))));
      continue;
    }
    // A table: a header row with a pipe, then a rule of as many cells
    // (with a pipe too: a lone `---` under a line is no table).
    if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])
      && lines[i + 1].includes('|') && cells(line).length === cells(lines[i + 1]).length) {
      flush();
      const rows = [];
      let j = i + 2;
      for (; j < lines.length && lines[j].includes('|') && lines[j].trim(); j++) rows.push(lines[j]);
      root.append(table(line, lines[i + 1], rows));
      i = j - 1;
      continue;
    }
    const h = /^(#{1,6})\s+(.*)$/.exec(line);
    const li = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/.exec(line);
    if (h) {
      flush();
      root.append(mdEl('h' + Math.min(6, h[1].length + top - 1), null, inline(h[2])));
    } else if (li) {
      if (para.length) flush();
      const tag = li[1] ? 'ol' : 'ul';
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = mdEl(tag);
        root.append(list);
      }
      list.append(mdEl('li', null, inline(li[2])));
    } else if (/^>\s?/.test(line)) {
      flush();
      root.append(mdEl('blockquote', null, inline(line.replace(/^>\s?/, ''))));
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
