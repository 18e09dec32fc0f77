// The vidpipe dashboard. Figures come from the server-sent events of /api/events (`stats`
// every second, `stream` and `removed` on changes); while that stream is down the page polls
// /api/stats instead. Latency history is kept here, in the page: the API only knows "now".
import { $, api, authHeaders, clipButton, el, errorText, eventSnapshot, eventText, initToken,
  loadSnapshot, localTime, needToken as markToken, whyDown } from './api.js';
import { drawChart, fmtDuration, fmtMs, record, recordValue } from './chart.js';
import { drawShapes, lineCounts, shapesOf, zoneCounts } from './shapes.js';

const STAGES = ['decode', 'preprocess', 'infer', 'postprocess', 'sink'];
// Where a stage that only some services have goes: analytics (tracked streams) before sink.
const ORDER = ['decode', 'preprocess', 'infer', 'postprocess', 'analytics', 'sink'];
// A channel named `<stream>/<kind>[/<stream>]` (pipelines/build.py) feeds this stage.
const QUEUE_FEEDS = { decoded: 'preprocess', prepared: 'infer', inferred: 'postprocess',
  detected: 'analytics', results: 'sink' };
const DROP_LABELS = { dropped_full: 'queue full', dropped_stale: 'too old',
  dropped_stopped: 'stopped', decode_error: 'decode error', model_error: 'model error' };
// Shown only once counted: a service on Ray workers that lost one (docs/OPERATIONS.md).
const RARE_DROP_LABELS = { dropped_failover: 'worker lost' };
const POLL_MS = 1000;
const HOT_BUSY = 0.5; // the busiest stage is called the bottleneck from this share on
const SNAPSHOT_MS = 1000;
const STALE_MS = 3500;
// A card made from a POST answer may be missing from a stats event computed just before.
const NEW_CARD_GRACE_MS = 3000;
const NOTICE_MS = 10_000;

const history = { stages: new Map(), streams: new Map() }; // name -> [{t, p50, p95, p99}]
const occupancy = new Map(); // "stream/zone" -> [{t, occupancy}]: each zone's over time
const cards = new Map(); // stream id -> card (see makeCard)
const stageBoxes = new Map(); // stage name -> {box, parts}
let lastStatsAt = 0;
let lastDrops = null; // {t, total} for the drop rate
let pollTimer = null;

// ---- helpers ----------------------------------------------------------------------------
function rank(stage) {
  return ORDER.includes(stage) ? ORDER.indexOf(stage) : ORDER.length;
}

// ---- pipeline ---------------------------------------------------------------------------
function queuesByStage(channels) {
  const queues = {};
  for (const { name, depth, capacity } of channels) {
    const parts = name.split('/');
    const kind = QUEUE_FEEDS[parts[1]] ? parts[1] : parts[0]; // unnamed pipelines: no prefix
    const stage = QUEUE_FEEDS[kind];
    if (!stage) continue;
    const q = (queues[stage] ??= { depth: 0, capacity: 0 });
    q.depth += depth;
    q.capacity += capacity;
  }
  return queues;
}

function stageBox(name) {
  if (stageBoxes.has(name)) return stageBoxes.get(name);
  const pipeline = $('pipeline');
  const parts = {};
  if (stageBoxes.size > 0) {
    parts.queue = el('div', 'queue');
    parts.queue.dataset.testid = `stage-${name}-queue`;
    parts.queue.append(el('span', 'qlabel', 'queue'), el('b', 'qdepth', '–'),
      el('div', 'qbar'), el('span', 'arrow', '→'));
    parts.queue.querySelector('.qbar').append(el('i'));
    pipeline.append(parts.queue);
  }
  const box = el('div', 'stage idle');
  box.dataset.testid = `stage-${name}`;
  const head = el('div', 'head');
  head.append(el('b', 'name', name), el('span', 'threads'), el('span', 'tag', 'busiest'));
  parts.busy = el('b', 'busy', '–');
  const busyRow = el('div', 'busyrow');
  busyRow.append(parts.busy, el('span', 'unit', 'busy'), el('div', 'bar'));
  busyRow.querySelector('.bar').append(el('i'));
  parts.latency = el('div', 'latency');
  parts.latency.append(el('span', 'none', 'no data yet'));
  parts.latency.dataset.testid = `stage-${name}-latency`;
  parts.chart = el('canvas', 'chart');
  parts.chart.dataset.testid = `stage-${name}-chart`;
  parts.wait = el('div', 'wait');
  box.append(head, busyRow, parts.latency, parts.chart, parts.wait);
  // in pipeline order: a stage seen later (analytics) goes before the queue of the first
  // stage that comes after it (the first stage, decode, is always made first)
  const later = [...stageBoxes.values()].find((e) => e.parts.queue
    && rank(e.box.dataset.testid.slice(6)) > rank(name));
  if (later) pipeline.insertBefore(parts.queue, later.parts.queue);
  if (later) pipeline.insertBefore(box, later.parts.queue);
  else pipeline.append(box);
  const entry = { box, parts };
  stageBoxes.set(name, entry);
  return entry;
}

// Three columns, coloured like the chart's lines, so they double as its legend.
function latencyLine(node, ms) {
  node.replaceChildren(...['p50', 'p95', 'p99'].map((k) => {
    const cell = el('span', `q ${k}`);
    cell.append(el('small', '', k), el('b', '', fmtMs(ms[k])));
    return cell;
  }), el('small', 'unit', 'ms'));
}

function busyClass(busy) {
  return busy >= 0.8 ? 'hot' : busy >= 0.5 ? 'warm' : 'cool';
}

function renderStage(name, row, queue, bottleneck, now) {
  const { box, parts } = stageBox(name);
  box.classList.toggle('idle', !row);
  box.classList.toggle('bottleneck', bottleneck);
  box.dataset.bottleneck = String(bottleneck);
  // the busiest stage caps the frame rate; it is a bottleneck once it is busy half the time
  const calm = bottleneck && (!row || row.busy < HOT_BUSY);
  box.classList.toggle('calm', calm);
  box.querySelector('.tag').textContent = calm ? 'busiest' : 'bottleneck';
  if (parts.queue) {
    const q = queue || { depth: 0, capacity: 0 };
    parts.queue.querySelector('.qdepth').textContent = `${q.depth}/${q.capacity || '–'}`;
    parts.queue.querySelector('.qbar i').style.width =
      `${q.capacity ? (100 * q.depth) / q.capacity : 0}%`;
    parts.queue.classList.toggle('full', q.capacity > 0 && q.depth >= q.capacity);
  }
  const series = history.stages.get(name) || [];
  drawChart(parts.chart, series, now);
  if (!row) {
    parts.busy.textContent = '–';
    parts.latency.replaceChildren(el('span', 'none', 'no data yet'));
    return;
  }
  box.querySelector('.threads').textContent = row.threads > 1 ? `×${row.threads}` : '';
  parts.busy.textContent = `${Math.round(row.busy * 100)}%`;
  const bar = box.querySelector('.bar');
  bar.className = `bar ${busyClass(row.busy)}`;
  bar.firstChild.style.width = `${Math.min(100, row.busy * 100)}%`;
  if (row.work_ms.p50 === null) {
    parts.latency.replaceChildren(el('span', 'none', 'no items in the last minute'));
  }
  else latencyLine(parts.latency, row.work_ms);
  parts.wait.textContent = row.wait_ms.p50 === null ? ''
    : `wait p50 ${fmtMs(row.wait_ms.p50)} · p95 ${fmtMs(row.wait_ms.p95)} ms`;
}

function renderPipeline(stats, now) {
  const rows = new Map(stats.stages.map((s) => [s.stage, s]));
  const names = [...STAGES, ...stats.stages.map((s) => s.stage).filter((n) => !STAGES.includes(n))];
  names.sort((a, b) => rank(a) - rank(b));
  // The busiest stage (per thread) is the one that caps the frame rate.
  const busiest = stats.stages.reduce((a, b) => (!a || b.busy > a.busy ? b : a), null);
  const queues = queuesByStage(stats.channels);
  for (const name of names) {
    renderStage(name, rows.get(name), queues[name],
      !!busiest && busiest.busy > 0 && busiest.stage === name, now);
  }
}

// ---- drops, batches, totals ---------------------------------------------------------------
function renderDrops(stats, now) {
  const received = stats.streams.reduce((n, s) => n + (s.received || 0), 0);
  // Every known cause, zeros too: "none stale" is worth seeing at a glance.
  const entries = Object.entries({ ...Object.fromEntries(Object.keys(DROP_LABELS).map((k) => [k, 0])),
    ...stats.drops });
  const total = entries.reduce((n, [, c]) => n + c, 0);
  const rate = lastDrops && now > lastDrops.t ? ((total - lastDrops.total) * 1000) / (now - lastDrops.t) : 0;
  lastDrops = { t: now, total };
  const box = $('drops');
  box.replaceChildren(...entries.map(([cause, n]) => {
    const chip = el('span', `chip ${cause}${n ? '' : ' zero'}`);
    chip.dataset.testid = `drops-${cause}`;
    const pct = received && n ? ` (${((100 * n) / received).toFixed(1)}%)` : '';
    chip.append(el('span', '', DROP_LABELS[cause] || RARE_DROP_LABELS[cause] || cause),
      el('b', '', ` ${n}`), pct);
    return chip;
  }), el('span', 'rate', rate > 0 ? `${rate.toFixed(1)}/s now` : 'none in the last second'));
  const batches = batchSummary(stats.batch_sizes);
  $('batches').textContent = batches ? `inference batches (frames): ${batches}` : '';
}

// "mean M · size×count ...", or '' before the first batch: {"<size>": count} as the API gives it.
function batchSummary(counts) {
  const sizes = Object.entries(counts);
  const calls = sizes.reduce((n, [, c]) => n + c, 0);
  if (!calls) return '';
  const mean = sizes.reduce((n, [k, c]) => n + Number(k) * c, 0) / calls;
  return `mean ${mean.toFixed(1)} · ${sizes.map(([k, c]) => `${k}×${c}`).join('  ')}`;
}

// ---- detectors ---------------------------------------------------------------------------
function renderDetectors(stats) {
  const box = $('detectors');
  const detectors = stats.detectors || [];
  if (!detectors.length) {
    box.replaceChildren(el('p', 'empty',
      'No detector loaded: it loads with the first stream that uses it.'));
    return;
  }
  box.replaceChildren(...detectors.map((d) => {
    const row = el('div', `detector ${d.state || 'up'}`);
    row.dataset.testid = `detector-${d.model}@${d.device}`;
    const summary = batchSummary(d.batches);
    const streams = el('span', 'dstreams', d.streams.length ? d.streams.join(', ') : 'no streams');
    streams.dataset.testid = 'detector-streams';
    const batches = el('span', 'dbatches', summary ? `batches: ${summary}` : 'no batch yet');
    batches.dataset.testid = 'detector-batches';
    const restarts = d.restarts ? ` · ${d.restarts} restart${d.restarts > 1 ? 's' : ''}` : '';
    row.append(el('b', '', `${d.model} @ ${d.device}`),
      el('span', 'dstate', `${d.state || 'up'} · ${d.fps.toFixed(1)} fps${restarts}`),
      el('span', 'dcount', `${d.streams.length} stream${d.streams.length === 1 ? '' : 's'}:`),
      streams, batches);
    if (d.candidate) row.append(candidateLine(d.candidate));
    return row;
  }));
}

// A candidate model compared beside the detector (POST /api/detectors/{id}/candidate).
function candidateLine(c) {
  const line = el('span', `dcandidate${c.error ? ' failed' : ''}`);
  line.dataset.testid = 'detector-candidate';
  const [mine, theirs] = c.boxes_per_frame;
  const agreement = c.frame_agreement === null ? 'no frame compared yet'
    : `agrees on ${(100 * c.frame_agreement).toFixed(1)}% of ${c.frames} frames · boxes a `
      + `frame ${mine} here, ${theirs} there`;
  line.textContent = `candidate ${c.file}: ${c.error ? `failed: ${c.error}` : agreement} · `
    + `${c.cpu_share.toFixed(2)} of a core (budget ${c.cpu_budget})`;
  return line;
}

// How many more cameras like the running ones the machine holds, as measured; overloaded
// when more run than it holds (one added with force).
function renderHeadroom(stats) {
  const room = stats.headroom;
  const node = $('headroom');
  node.hidden = !room;
  if (!room) return;
  const each = `${room.camera_cores.toFixed(2)} of a core each, ${room.used_cores.toFixed(2)} of `
    + `${room.cores} cores used over ${room.window_s.toFixed(0)} s`;
  node.classList.toggle('overloaded', room.overloaded);
  node.textContent = room.overloaded
    ? `Overloaded: ${room.cameras} cameras run where this machine holds about ${room.holds} `
      + `(${each}); every camera is slowed down: remove one`
    : `Room for ${room.more} more camera${room.more === 1 ? '' : 's'} like these (${each})`;
}

// What the service keeps on disk, against its retention (the oldest go first).
function renderStorage(stats) {
  const storage = stats.storage;
  $('storage').hidden = !storage;
  if (!storage) return;
  const kept = (u) => `${u.mb.toFixed(1)} MB of ${u.retain_mb} MB, `
    + `${+(u.retain_hours / 24).toFixed(1)} days at most`;
  const parts = [];
  if (storage.results) parts.push(`results ${kept(storage.results)}`);
  if (storage.media) parts.push(`snapshots and clips ${kept(storage.media)}`);
  parts.push(`${storage.events_indexed} events remembered`);
  const age = storage.measured_at ? Math.max(0, Date.now() / 1000 - storage.measured_at) : null;
  const when = age === null ? '' : ` (measured ${age < 90 ? `${age.toFixed(0)} s`
    : `${(age / 60).toFixed(0)} min`} ago)`;
  $('storage').textContent = `Kept on disk: ${parts.join(' · ')}${when}`;
}

function renderTotals(stats) {
  const up = stats.streams.filter((s) => s.state === 'up').length;
  $('total-streams').textContent = stats.streams.length ? `${up}/${stats.streams.length} up` : '0';
  $('total-fps').textContent = stats.streams.reduce((n, s) => n + s.fps, 0).toFixed(1);
  $('total-drops').textContent = String(Object.values(stats.drops).reduce((n, c) => n + c, 0));
  // NVML's figures, where the service runs on a GPU
  const gpus = stats.gpus || [];
  $('total-gpu').hidden = gpus.length === 0;
  $('total-gpu-figures').textContent = gpus.map((g) => `${Math.round(g.utilization * 100)}% · `
    + `NVDEC ${Math.round(g.decoder_utilization * 100)}%`).join(', ');
}

// ---- stream cards ------------------------------------------------------------------------
function makeCard(stream) {
  const node = $('stream-template').content.firstElementChild.cloneNode(true);
  const part = (role) => node.querySelector(`[data-role="${role}"]`);
  const card = { id: stream.id, node, part, addedAt: Date.now(), loading: false, notice: '',
    objectUrl: null };
  node.dataset.testid = `stream-${stream.id}`;
  for (const role of ['snapshot', 'state', 'fps', 'p50', 'p99', 'reconnects', 'remove', 'error',
    'overlay', 'analytics']) {
    part(role).dataset.testid = `stream-${stream.id}-${role}`;
  }
  part('id').textContent = stream.id;
  part('remove').addEventListener('click', () => onRemoveClick(card));
  $('streams').append(node);
  cards.set(stream.id, card);
  refreshSnapshot(card);
  return card;
}

function upsertStream(stream) {
  const card = cards.get(stream.id) || makeCard(stream);
  // The end of a long path or URL says most; the marks keep its slashes in place (see .url).
  card.part('url').textContent = `\u200e${stream.url}\u200e`;
  card.part('url').title = stream.url;
  const state = card.part('state');
  state.textContent = stream.state;
  state.className = `state ${stream.state}`;
  card.node.dataset.state = stream.state;
  card.part('reconnects').textContent =
    stream.reconnects === 1 ? '1 reconnect' : `${stream.reconnects} reconnects`;
  card.part('error').textContent = card.notice || stream.error || whyDown(stream);
  renderAnalytics(card, stream);
  $('no-streams').hidden = cards.size > 0;
  return card;
}

// Lines and zones over the latest frame, in its pixels (the snapshot is the full picture, so
// the overlay's viewBox is the image's natural size), with their counts in words beside it.
function renderAnalytics(card, stream) {
  const analytics = stream.analytics;
  const words = card.part('analytics');
  drawShapes(card.part('overlay'), shapesOf(stream), analytics && analytics.counts);
  words.replaceChildren();
  if (!analytics) return;
  const parts = [];
  for (const zone of analytics.zones) {
    const c = zoneCounts(analytics.counts, zone.name);
    parts.push([`zone ${zone.name}`, `${c.occupancy} in now, ${c.entered} entered, `
      + `${c.exited} left`]);
  }
  for (const line of analytics.lines) {
    const c = lineCounts(analytics.counts, line.name);
    parts.push([`line ${line.name}`, `in ${c.in}, out ${c.out}`]);
  }
  words.dataset.testid = `stream-${card.id}-analytics`;
  for (const [name, figures] of parts) {
    const row = el('div', 'arow');
    row.append(el('b', '', name), document.createTextNode(` ${figures}`));
    words.append(row);
  }
  const now = Date.now();
  for (const zone of analytics.zones) { // how many were inside, over the last minutes
    const key = `${stream.id}/${zone.name}`;
    const series = recordValue(occupancy, key, 'occupancy',
      zoneCounts(analytics.counts, zone.name).occupancy, now);
    const canvas = el('canvas', 'chart occupancy');
    canvas.dataset.testid = `stream-${card.id}-occupancy-${zone.name}`;
    canvas.title = `tracks inside zone ${zone.name} over time`;
    words.append(canvas);
    drawChart(canvas, series, now, { lines: ['occupancy'], unit: 'inside' });
  }
}

function renderStreamFigures(card, s, now) {
  card.part('fps').textContent = s.fps.toFixed(1);
  card.part('p50').textContent = fmtDuration(s.latency_ms.p50);
  card.part('p99').textContent = fmtDuration(s.latency_ms.p99);
  drawChart(card.part('chart'), record(history.streams, s.id, s.latency_ms, now), now);
  // a frame motion gating kept from the detector is a result, not a drop
  const drops = Object.entries(s.outcomes)
    .filter(([k, n]) => k !== 'processed' && !k.startsWith('skipped') && n > 0);
  const idle = s.outcomes.skipped_idle || 0;
  card.part('drops').textContent = (drops.length
    ? `dropped ${drops.map(([k, n]) => `${n} ${DROP_LABELS[k] || k}`).join(', ')}`
      + ` of ${s.received}`
    : `${s.outcomes.processed || 0} processed, none dropped`)
    + (idle ? ` · ${idle} without the detector (nothing moving)` : '');
  if (s.gaps) {
    card.part('drops').textContent += ` · ${s.gaps === 1 ? '1 gap' : `${s.gaps} gaps`} `
      + `(${fmtDuration(1000 * s.gap_s)} without frames)`;
  }
}

function renderStreams(stats, now) {
  const seen = new Set();
  for (const s of stats.streams) {
    seen.add(s.id);
    renderStreamFigures(upsertStream(s), s, now);
  }
  for (const [id, card] of cards) {
    if (!seen.has(id) && now - card.addedAt > NEW_CARD_GRACE_MS) dropCard(id);
  }
}

function dropCard(id) {
  const card = cards.get(id);
  if (!card) return;
  card.node.remove();
  if (card.objectUrl) URL.revokeObjectURL(card.objectUrl);
  cards.delete(id);
  history.streams.delete(id);
  for (const key of [...occupancy.keys()]) if (key.startsWith(`${id}/`)) occupancy.delete(key);
  $('no-streams').hidden = cards.size > 0;
}

// One request per card at a time; 204 (no content) means the stream has no frame yet.
async function refreshSnapshot(card) {
  if (await loadSnapshot(card.id, card.part('snapshot'), card.part('overlay'), card)) {
    card.node.classList.add('has-frame');
  }
}

// ---- events --------------------------------------------------------------------------------
// Objects' updates are left out: the list says when something happens, not where it is.
const MAX_EVENTS = 30;
const SHOWN_EVENTS = new Set(['new', 'end', 'line_cross', 'zone_enter', 'zone_exit', 'loiter',
  'crowd_begin', 'crowd_end']);
const shownEvents = new Set(); // event ids in the list

function eventRow(e) {
  const row = el('li');
  row.dataset.testid = `event-${e.id}`;
  row.dataset.type = e.type;
  row.append(el('span', 'when', localTime(e.time)), el('span', 'kind', e.type),
    el('span', 'what', eventText(e)));
  if (e.snapshot) row.append(eventSnapshot(e, `event-${e.id}`, (img) => img.remove()));
  if (e.clip) {
    row.append(clipButton(e, `event-${e.id}`, (video) => {
      // a row whose clip is playing stays in the list until the clip ends (addEvent)
      row.classList.add('watched');
      video.addEventListener('ended', () => row.classList.remove('watched'));
    }));
  }
  return row;
}

function addEvent(e) {
  if (!SHOWN_EVENTS.has(e.type) || shownEvents.has(e.id)) return;
  shownEvents.add(e.id);
  const list = $('events');
  $('no-events').hidden = true;
  list.insertBefore(eventRow(e), $('no-events').nextSibling);
  // The oldest rows go first, except one whose clip is playing: it stays until the clip ends.
  const rows = [...list.children].filter((row) => row.id !== 'no-events');
  const spare = rows.filter((row) => !row.classList.contains('watched'));
  const kept = Math.max(0, MAX_EVENTS - (rows.length - spare.length));
  for (const row of spare.slice(kept)) {
    shownEvents.delete(row.dataset.testid.slice(6));
    row.querySelectorAll('img, video').forEach((m) => m.src && URL.revokeObjectURL(m.src));
    row.remove();
  }
}

async function loadRecentEvents() {
  try {
    const r = await fetch(`/api/events/recent?limit=${MAX_EVENTS * 4}`,
      { cache: 'no-store', headers: authHeaders() });
    if (!r.ok) return;
    const { events } = await r.json();
    events.reverse().forEach(addEvent); // oldest first, so the newest ends on top
  } catch {
    // the feed brings the next ones
  }
}

// ---- the API -----------------------------------------------------------------------------
// With a token set on the service every data route needs it, the event feed too: so the feed
// is read with fetch (EventSource cannot send a header), and the token is kept for the
// browser session only (api.js).
function needToken() {
  setLink('token', markToken());
}

function setMessage(text, kind) {
  const box = $('add-message');
  box.textContent = text;
  box.className = `message ${kind}`;
  box.dataset.kind = kind;
}

async function onAdd(event) {
  event.preventDefault();
  const url = $('add-url').value.trim();
  const id = $('add-id').value.trim();
  const button = event.target.querySelector('button');
  button.disabled = true;
  setMessage('adding…', 'pending');
  try {
    const r = await api('POST', '/api/streams', id ? { url, id } : { url });
    if (!r.ok) { setMessage(await errorText(r), 'error'); return; }
    const stream = await r.json();
    upsertStream(stream);
    event.target.reset();
    setMessage(`added ${stream.id}`, 'ok');
  } catch (e) {
    setMessage(`the service did not answer (${e.message})`, 'error');
  } finally {
    button.disabled = false;
  }
}

// Two clicks, so a stray one does not stop a camera.
async function onRemoveClick(card) {
  const button = card.part('remove');
  if (button.dataset.armed !== 'true') {
    button.dataset.armed = 'true';
    button.textContent = 'Confirm remove';
    setTimeout(() => { button.dataset.armed = ''; button.textContent = 'Remove'; }, 3000);
    return;
  }
  button.disabled = true;
  try {
    const r = await api('DELETE', `/api/streams/${encodeURIComponent(card.id)}`);
    if (r.ok || r.status === 404) { dropCard(card.id); return; }
    card.notice = `remove failed: ${await errorText(r)}`;
  } catch (e) {
    card.notice = `remove failed: the service did not answer (${e.message})`;
  }
  card.part('error').textContent = card.notice;
  Object.assign(button, { disabled: false, textContent: 'Remove' });
  button.dataset.armed = '';
  setTimeout(() => { card.notice = ''; }, NOTICE_MS); // the stream's own error shows again
}

// ---- the data feed ------------------------------------------------------------------------
function setLink(mode, text) {
  const link = $('link');
  link.dataset.mode = mode;
  link.textContent = text || mode;
}

function onStats(stats, via) {
  const now = Date.now();
  lastStatsAt = now;
  setLink(via, via === 'live' ? 'live' : 'polling /api/stats');
  for (const s of stats.stages) record(history.stages, s.stage, s.work_ms, now);
  renderPipeline(stats, now);
  renderDrops(stats, now);
  renderDetectors(stats);
  renderStorage(stats);
  renderHeadroom(stats);
  renderStreams(stats, now);
  renderTotals(stats);
}

async function poll() {
  try {
    const r = await fetch('/api/stats', { cache: 'no-store', headers: authHeaders() });
    if (r.status === 401) {
      needToken();
      return;
    }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    onStats(await r.json(), 'polling');
  } catch {
    setLink('offline', 'service unreachable');
  }
}

function startPolling() {
  if (pollTimer) return;
  pollTimer = setInterval(poll, POLL_MS);
  poll();
}

function stopPolling() {
  clearInterval(pollTimer);
  pollTimer = null;
}

// The event feed (server-sent events) over fetch; on any failure the stats are polled and
// the feed is tried again in 5 s.
async function connect() {
  try {
    const r = await fetch('/api/events', { cache: 'no-store', headers: authHeaders() });
    if (r.status === 401) needToken();
    if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
    $('token').classList.remove('needed');
    stopPolling();
    loadRecentEvents(); // what happened before the feed (re)connected
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        onEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch {
    // unreachable, refused or cut: polled meanwhile
  }
  startPolling();
  setTimeout(connect, 5000);
}

function onEvent(block) {
  let type = 'message';
  let data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) type = line.slice(6).trim();
    else if (line.startsWith('data:')) data += line.slice(5).trim();
  }
  if (!data) return;  // a keep-alive comment
  const payload = JSON.parse(data);
  if (type === 'stats') onStats(payload, 'live');
  else if (type === 'stream') upsertStream(payload.stream);
  else if (type === 'removed') dropCard(payload.stream.id);
  else if (type === 'event') addEvent(payload.event);
}

function watchFreshness() {
  const age = Date.now() - lastStatsAt;
  if (lastStatsAt && age > STALE_MS) setLink('stale', `no data for ${Math.round(age / 1000)} s`);
}

function init() {
  initToken();
  $('add-form').addEventListener('submit', onAdd);
  for (const name of STAGES) stageBox(name);
  connect();
  setInterval(() => cards.forEach(refreshSnapshot), SNAPSHOT_MS);
  setInterval(watchFreshness, 1000);
}

init();
