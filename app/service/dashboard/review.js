// The review page: events (vidpipe.event/1) newest first, filtered by camera, kind, label,
// line, zone and time range, a page at a time (the API's `next` cursor), with the ended
// objects' snapshots and clips. The filters live in the page's address, so a filtered view
// can be kept and shared.
import { $, api, clipButton, el, errorText, eventSnapshot, eventText, initToken, localTime,
  needToken } from './api.js';

const PAGE = 25;
const EVENTS = ['new', 'end', 'line_cross', 'zone_enter', 'zone_exit', 'loiter', 'crowd_begin',
  'crowd_end'];
const FILTERS = ['stream', 'type', 'label', 'line', 'zone', 'since', 'until'];
let pages = []; // the cursors of the pages shown so far (null: the newest)
let asked = 0; // requests made: only the latest one's answer is shown

function setLink(mode, text) {
  $('link').dataset.mode = mode;
  $('link').textContent = text;
}

// The address's filters; `since` and `until` as the browser's local time, sent as UTC.
function filters() {
  const params = new URLSearchParams(window.location.search);
  return Object.fromEntries(FILTERS.map((k) => [k, params.get(k) || '']));
}

// A date typed in the page (the browser's local time), or null for none or one it cannot read.
function typedDate(text) {
  const moment = text ? new Date(text) : null;
  return moment && !Number.isNaN(moment.getTime()) ? moment : null;
}

function query(f, before) {
  const params = new URLSearchParams({ limit: String(PAGE) });
  for (const key of ['stream', 'type', 'label', 'line', 'zone']) {
    if (f[key]) params.set(key, f[key]);
  }
  // objects' updates (as tracks move, every update_s) only when asked for: they bury the rest
  if (!f.type) EVENTS.forEach((type) => params.append('type', type));
  for (const key of ['since', 'until']) {
    const moment = typedDate(f[key]);
    if (moment) params.set(key, moment.toISOString());
  }
  if (before) params.set('before', before);
  return `/api/events/recent?${params}`;
}

function row(e) {
  const li = el('li');
  li.dataset.testid = `review-${e.id}`;
  li.dataset.type = e.type;
  li.dataset.time = e.time;
  li.append(el('span', 'when', localTime(e.time, true)), el('b', '', e.stream), el('span', 'kind', e.type),
    el('span', 'what', eventText(e, false)));
  const prefix = `review-${e.id}`;
  const gone = (img) => img.replaceWith(el('span', 'muted', 'snapshot gone (retention)'));
  const img = e.snapshot ? eventSnapshot(e, prefix, gone) : el('span');
  if (e.snapshot) img.addEventListener('click', () => img.classList.toggle('large'));
  li.append(img, e.clip ? clipButton(e, prefix) : el('span'));
  return li;
}

// A page of events: the newest (`before` null) or those before a cursor.
async function show(before) {
  const mine = ++asked;
  $('older').disabled = true;
  try {
    await showPage(before, mine);
  } catch (e) {
    if (mine === asked) setLink('offline', `service unreachable (${e.message})`);
  } finally {
    if (mine === asked) $('older').disabled = false;
  }
}

async function showPage(before, mine) {
  const f = filters();
  const r = await api('GET', query(f, before));
  if (mine !== asked) return; // a newer request was made meanwhile
  if (r.status === 401) {
    setLink('token', needToken());
    return;
  }
  if (!r.ok) {
    setLink('offline', 'service unreachable');
    $('review').replaceChildren(el('li', 'empty', `the service refused: ${await errorText(r)}`));
    return;
  }
  setLink('live', 'live');
  const { events, next } = await r.json();
  if (mine !== asked) return;
  $('review').querySelectorAll('img, video').forEach((m) => m.src && URL.revokeObjectURL(m.src));
  $('review').replaceChildren(...(events.length ? events.map(row)
    : [el('li', 'empty', 'No events match: streams with a tracker make them.')]));
  $('older').hidden = !next;
  $('older').onclick = () => { pages.push(next); show(next); };
  $('newest').hidden = pages.length === 0;
  const bad = ['since', 'until'].filter((k) => f[k] && !typedDate(f[k]));
  const shown = FILTERS.filter((k) => f[k] && !bad.includes(k)).map((k) => `${k} ${f[k]}`)
    .concat(bad.map((k) => `${k} "${f[k]}" is no date: left out`)).join(', ');
  const ended = events.filter((e) => e.type === 'end');
  const noClips = ended.length && !ended.some((e) => e.clip)
    ? ' · no clips: the service keeps them when its config sets events: clips' : '';
  $('page-info').textContent = `page ${pages.length + 1} · ${events.length} event`
    + `${events.length === 1 ? '' : 's'}${shown ? ` · ${shown}` : ''}${noClips}`;
}

async function loadCameras() {
  let r;
  try {
    r = await api('GET', '/api/streams');
  } catch {
    return; // the events' request says the service is unreachable
  }
  if (!r.ok) return;
  const select = $('filters').elements.stream;
  const chosen = select.value || filters().stream; // what the user chose meanwhile stays
  const ids = (await r.json()).map((s) => s.id);
  if (chosen && !ids.includes(chosen)) ids.push(chosen); // a removed camera's events stay
  select.replaceChildren(el('option', '', 'all'), ...ids.map((id) => el('option', '', id)));
  select.options[0].value = '';
  select.value = chosen;
}

function fillForm() {
  const f = filters();
  const form = $('filters');
  for (const key of FILTERS) form.elements[key].value = f[key];
}

function onFilter(event) {
  event.preventDefault();
  const form = new FormData($('filters'));
  const params = new URLSearchParams();
  for (const key of FILTERS) {
    const value = String(form.get(key) || '').trim();
    if (value) params.set(key, value);
  }
  window.history.pushState(null, '', `?${params}`);
  pages = [];
  show(null);
}

function init() {
  initToken(() => { loadCameras(); show(null); });
  fillForm();
  $('filters').addEventListener('submit', onFilter);
  $('filters').addEventListener('reset', () => setTimeout(() => onFilter(new Event('submit')), 0));
  $('newest').addEventListener('click', () => { pages = []; show(null); });
  window.addEventListener('popstate', () => { fillForm(); pages = []; show(null); });
  loadCameras(); // sets only the camera list: what was typed meanwhile stays
  show(null);
}

init();
