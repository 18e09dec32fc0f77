// The camera UI: a grid of cameras with their latest pictures, why one is not up, and their
// counts; a large live view of one (its boxes and track ids drawn by the service, its lines,
// zones and masks drawn here and edited with the mouse); the Add form. Figures come from
// /api/stats every second; the page's address names the camera in view (#<id>).
import { $, api, el, errorText, initToken, loadSnapshot, needToken, whyDown } from './api.js';
import { ShapeEditor } from './editor.js';
import { drawShapes, lineCounts, shapesOf, zoneCounts } from './shapes.js';

const POLL_MS = 1000;
const GRID_PICTURE_MS = 1000;
const LIVE_PICTURE_MS = 250;
const HEATMAP_MS = 3000;
const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const PREFIX = { line: 'line', zone: 'zone', mask: 'mask' };
const HINTS = {
  line: 'press where the line starts and release where it ends (or click twice)',
  zone: 'click each corner; click the first again, double-click or press Enter to close it',
  mask: 'click each corner; click the first again, double-click or press Enter to close it',
};

const tiles = new Map(); // stream id -> {node, part, stream, objectUrl, loading}
let streams = new Map(); // stream id -> the stream as /api/stats shows it
let selected = null; // the stream id in the live view
let heatmap = false; // the live view shows where tracked objects were, not the picture
let editor = null;
let saving = false; // a save on its way: Save stays disabled
let polls = 0; // polls sent; a poll sent before the last save answered is stale
let staleBefore = 0;
let polling = false;
const live = { loading: false, objectUrl: null, heatAt: 0 };

// ---- the grid -------------------------------------------------------------------------------
function tile(stream) {
  let entry = tiles.get(stream.id);
  if (entry) return entry;
  const node = $('tile-template').content.firstElementChild.cloneNode(true);
  const part = (role) => node.querySelector(`[data-role="${role}"]`);
  node.dataset.testid = `camera-${stream.id}`;
  for (const role of ['snapshot', 'overlay', 'state', 'why', 'counts', 'fps']) {
    part(role).dataset.testid = `camera-${stream.id}-${role}`;
  }
  part('id').textContent = stream.id;
  const open = () => { window.location.hash = encodeURIComponent(stream.id); };
  node.addEventListener('click', open);
  node.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
  $('grid').append(node);
  entry = { node, part, loading: false, objectUrl: null };
  tiles.set(stream.id, entry);
  return entry;
}

function countsText(stream) {
  const a = stream.analytics;
  if (!a) return 'detections only';
  const parts = a.lines.map((l) => {
    const c = lineCounts(a.counts, l.name);
    return `${l.name} in ${c.in} out ${c.out}`;
  });
  parts.push(...a.zones.map((z) => `${z.name} ${zoneCounts(a.counts, z.name).occupancy} in`));
  if (a.motion && a.motion !== 'off') parts.push(`motion ${a.motion}`);
  return parts.length ? parts.join(' · ') : `tracked (${a.track})`;
}

function renderTile(stream) {
  const { node, part } = tile(stream);
  node.dataset.state = stream.state;
  part('state').textContent = stream.state;
  part('state').className = `state ${stream.state}`;
  part('why').textContent = stream.error || whyDown(stream);
  part('fps').textContent = stream.state === 'up' ? `${stream.fps.toFixed(1)} fps` : '';
  part('counts').textContent = countsText(stream);
  drawShapes(part('overlay'), shapesOf(stream), stream.analytics && stream.analytics.counts);
}

async function refreshTile(id, entry) {
  if (await loadSnapshot(id, entry.part('snapshot'), entry.part('overlay'), entry)) {
    entry.node.classList.add('has-frame');
  }
}

function render(list) {
  streams = new Map(list.map((s) => [s.id, s]));
  for (const stream of list) renderTile(stream);
  for (const [id, entry] of tiles) {
    if (!streams.has(id)) {
      entry.node.remove();
      if (entry.objectUrl) URL.revokeObjectURL(entry.objectUrl);
      tiles.delete(id);
    }
  }
  $('no-cameras').textContent = 'No cameras yet: add one below.';
  $('no-cameras').hidden = tiles.size > 0;
  renderLive();
}

// ---- the live view ----------------------------------------------------------------------------
function renderLive() {
  const stream = selected && streams.get(selected);
  $('live').hidden = !stream;
  if (!stream) return;
  $('live-id').textContent = stream.id;
  $('live-state').textContent = stream.state;
  $('live-state').className = `state ${stream.state}`;
  $('live-why').textContent = stream.error || whyDown(stream);
  $('live-figures').textContent = `${stream.fps.toFixed(1)} fps · ${stream.received} frames`
    + (stream.analytics ? ` · tracked with ${stream.analytics.track}` : ' · not tracked');
  renderCounts(stream);
  editor.load(stream);
  renderEditing();
  $('tracker-row').hidden = !!stream.analytics;
}

function renderCounts(stream) {
  const a = stream.analytics;
  const rows = [];
  for (const line of a ? a.lines : []) {
    const c = lineCounts(a.counts, line.name);
    rows.push([`line ${line.name}`, `in ${c.in}`, `out ${c.out}`]);
  }
  for (const zone of a ? a.zones : []) {
    const c = zoneCounts(a.counts, zone.name);
    rows.push([`zone ${zone.name}`, `${c.occupancy} in now`, `${c.entered} entered`,
      `${c.exited} left`]);
  }
  $('live-counts').replaceChildren(...rows.map((cells) => {
    const tr = el('tr');
    tr.dataset.testid = `count-${cells[0].replace(' ', '-')}`;
    tr.append(...cells.map((c, i) => el(i ? 'td' : 'th', '', c)));
    return tr;
  }));
}

function onHeatmap() {
  heatmap = !heatmap;
  $('live-heatmap').setAttribute('aria-pressed', String(heatmap));
  $('live-heatmap').textContent = heatmap ? 'Picture' : 'Heatmap';
  $('live-nopicture').textContent = 'waiting for the first frame…';
  $('live').classList.remove('has-frame'); // not the other picture while this one loads
  $('live-picture').removeAttribute('data-loaded');
  live.heatAt = 0;
  refreshLive();
}

function select(id) {
  if (id === selected) return;
  selected = id;
  editor.revert();
  $('live-overlay').removeAttribute('viewBox'); // drawn in this camera's pixels, once known
  $('live-overlay').replaceChildren(); // not the last camera's shapes on this one's picture
  $('live-picture').removeAttribute('data-loaded');
  $('live').classList.remove('has-frame');
  $('save-message').textContent = '';
  renderLive();
  if (id && streams.has(id)) $('live').scrollIntoView({ block: 'start' });
}

async function refreshLive() {
  const id = selected;
  if (!id) return;
  // the heatmap is drawn and encoded for each request: every few seconds is enough
  if (heatmap && Date.now() - live.heatAt < HEATMAP_MS) return;
  if (heatmap) live.heatAt = Date.now();
  const loaded = await loadSnapshot(id, $('live-picture'), $('live-overlay'), live,
    heatmap ? 'heatmap.png' : 'snapshot.jpg');
  if (heatmap && !loaded && id === selected) {
    $('live-nopicture').textContent = 'no tracked object yet (a camera without a tracker has none)';
  }
  if (id !== selected) { // another camera was chosen meanwhile: not this picture's size
    $('live-overlay').removeAttribute('viewBox');
  } else if (loaded) {
    if (!$('live').classList.contains('has-frame')) {
      $('live').classList.add('has-frame');
      editor.render();
    }
  }
}

// ---- editing -------------------------------------------------------------------------------------
function nextName(kind) {
  const taken = new Set([...editor.shapes.lines, ...editor.shapes.zones, ...editor.shapes.masks]
    .map((s) => s.name));
  for (let i = 1; ; i += 1) if (!taken.has(`${PREFIX[kind]}${i}`)) return `${PREFIX[kind]}${i}`;
}

function onTool(kind) {
  if (editor.tool === kind) { // its button again: the tool is put down
    editor.setTool(null);
    onEdited();
    return;
  }
  if (!$('live').classList.contains('has-frame')) {
    $('tool-hint').textContent = 'shapes are drawn on the camera\'s picture: it has none yet';
    return;
  }
  const field = $('shape-name');
  const name = field.value.trim() || nextName(kind);
  if (!NAME.test(name)) {
    $('tool-hint').textContent = 'a name is 1 to 64 letters, digits, _ . or -';
    return;
  }
  editor.setTool(kind, name);
  $('tool-hint').textContent = `${kind} ${name}: ${HINTS[kind]}`;
  document.querySelectorAll('.tools button').forEach((b) => {
    b.classList.toggle('active', b.dataset.tool === kind);
  });
}

function onEdited() {
  $('shape-name').value = '';
  $('tool-hint').textContent = '';
  document.querySelectorAll('.tools button').forEach((b) => b.classList.remove('active'));
  if (!saving) setMessage('save-message', editor.dirty ? 'not saved yet' : '', 'pending');
  renderEditing();
}

// The shape list and the buttons, as the editor stands (after an edit, a save, a poll).
function renderEditing() {
  $('save').disabled = saving || !editor.dirty;
  $('revert').disabled = saving || !editor.dirty;
  renderShapeList();
}

let shownList = ''; // the list as drawn: rebuilt only when it changes, so a click holds

function renderShapeList() {
  const key = JSON.stringify([selected, editor.shapes.lines.map((s) => s.name),
    editor.shapes.zones.map((s) => s.name), editor.shapes.masks.map((s) => s.name)]);
  if (key === shownList) return;
  shownList = key;
  const items = [];
  for (const [kind, list] of [['line', 'lines'], ['zone', 'zones'], ['mask', 'masks']]) {
    for (const shape of editor.shapes[list]) {
      const li = el('li');
      li.dataset.testid = `shape-${shape.name}`;
      const remove = el('button', 'plain', 'remove');
      remove.type = 'button';
      remove.dataset.testid = `shape-${shape.name}-remove`;
      remove.addEventListener('click', () => editor.remove(list, shape.name));
      li.append(el('span', `kind ${kind}`, kind), el('b', '', shape.name), remove);
      items.push(li);
    }
  }
  $('shapes').replaceChildren(...items);
}

async function onSave() {
  const stream = streams.get(selected);
  if (!stream) return;
  const sent = JSON.parse(JSON.stringify(editor.shapes));
  const body = { ...sent };
  if (!stream.analytics && (body.lines.length || body.zones.length)) {
    body.track = $('live-tracker').value;
  }
  saving = true;
  renderEditing();
  try {
    const r = await api('PUT', `/api/streams/${encodeURIComponent(stream.id)}/analytics`, body);
    if (!r.ok) {
      setMessage('save-message', await errorText(r), 'error');
      return;
    }
    const shown = await r.json();
    staleBefore = polls + 1; // a poll already on its way has the shapes of before
    editor.accept(shown, sent);
    streams.set(shown.id, { ...stream, ...shown });
    setMessage('save-message', editor.dirty ? 'saved; edited since: not saved yet'
      : 'saved: the service keeps them across restarts', editor.dirty ? 'pending' : 'ok');
  } catch (e) {
    setMessage('save-message', `the service did not answer (${e.message})`, 'error');
  } finally {
    saving = false;
    renderEditing();
  }
}

function setMessage(id, text, kind) {
  const box = $(id);
  box.textContent = text;
  box.className = `message ${kind}`;
  box.dataset.kind = kind;
}

// Two clicks, so a stray one does not stop a camera.
async function onRemove() {
  const button = $('live-remove');
  const id = selected;
  if (button.dataset.armed !== 'true') {
    button.dataset.armed = 'true';
    button.textContent = `Confirm: remove ${id}`;
    setTimeout(() => { button.dataset.armed = ''; button.textContent = 'Remove'; }, 3000);
    return;
  }
  button.dataset.armed = '';
  button.textContent = 'Remove';
  const r = await api('DELETE', `/api/streams/${encodeURIComponent(id)}`).catch(() => null);
  if (r && (r.ok || r.status === 404)) {
    editor.revert(); // its unsaved edits go with it
    window.location.hash = '';
    await poll();
    return;
  }
  setMessage('save-message', r ? `remove failed: ${await errorText(r)}`
    : 'remove failed: the service did not answer', 'error');
}

// ---- adding a camera ------------------------------------------------------------------------------
// The rows of a Lines or Zones box, as the CLI's --line and --zone take them.
function parseShapes(text, kind) {
  return text.split('\n').map((row) => row.trim()).filter(Boolean).map((row) => {
    const match = /^([^=\s]+)\s*=\s*(.+)$/.exec(row);
    if (!match && /^[^=]*\s[^=]*=/.test(row)) {
      throw new Error(`${kind} "${row}": a name is letters, digits, _ . or - (no spaces)`);
    }
    const values = match ? match[2].split(',').map((v) => Number(v.trim())) : [];
    if (!match || values.some((v) => !Number.isFinite(v))) {
      throw new Error(`${kind} "${row}": expected NAME=${kind === 'line' ? 'x1,y1,x2,y2'
        : 'x1,y1,x2,y2,x3,y3[,...]'}`);
    }
    if (kind === 'line') {
      if (values.length !== 4) throw new Error(`line "${row}": needs 4 numbers`);
      return { name: match[1], points: values };
    }
    if (values.length < 6 || values.length % 2) {
      throw new Error(`zone "${row}": needs 3 or more x,y points`);
    }
    const polygon = [];
    for (let i = 0; i < values.length; i += 2) polygon.push([values[i], values[i + 1]]);
    return { name: match[1], polygon };
  });
}

async function onAdd(event) {
  event.preventDefault();
  const form = new FormData(event.target);
  const body = { url: form.get('url').trim() };
  if (form.get('id').trim()) body.id = form.get('id').trim();
  if (form.get('track')) body.track = form.get('track');
  if (form.get('motion') && form.get('motion') !== 'off') body.motion = form.get('motion');
  try {
    const lines = parseShapes(form.get('lines'), 'line');
    const zones = parseShapes(form.get('zones'), 'zone');
    if (lines.length) body.lines = lines;
    if (zones.length) body.zones = zones;
  } catch (e) {
    setMessage('add-message', e.message, 'error');
    return;
  }
  const button = event.target.querySelector('button[type="submit"]');
  button.disabled = true;
  setMessage('add-message', 'adding…', 'pending');
  try {
    const force = form.get('force') ? '?force=true' : '';
    const r = await api('POST', `/api/streams${force}`, body);
    if (!r.ok) {
      // past the measured headroom (409): the form offers to add it anyway
      if (r.status === 409) $('add-force-row').hidden = false;
      setMessage('add-message', await errorText(r), 'error');
      return;
    }
    const stream = await r.json();
    event.target.reset();
    $('add-force-row').hidden = true;
    const tracked = !body.track && stream.analytics
      ? ` (tracked with ${stream.analytics.track}: ${body.motion ? 'motion gating leaves '
        + 'frames to the tracker' : 'lines and zones count tracks'})` : '';
    setMessage('add-message', `added ${stream.id}${tracked}: it is remembered across restarts`,
      'ok');
    await poll();
  } catch (e) {
    setMessage('add-message', `the service did not answer (${e.message})`, 'error');
  } finally {
    button.disabled = false;
  }
}

// ---- the data ------------------------------------------------------------------------------------
function setLink(mode, text) {
  $('link').dataset.mode = mode;
  $('link').textContent = text;
  // what the page shows is of the last answer: dimmed while the service does not answer
  document.body.classList.toggle('stale', mode !== 'live');
}

async function poll() {
  if (polling) return; // one at a time: answers in the order asked
  polling = true;
  const sent = ++polls;
  try {
    const r = await api('GET', '/api/stats');
    if (r.status === 401) {
      setLink('token', needToken());
      $('no-cameras').textContent = 'The service needs its API token (top right) to show '
        + 'the cameras.';
      $('no-cameras').hidden = false;
      return;
    }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const stats = await r.json();
    setLink('live', 'live');
    if (sent >= staleBefore) render(stats.streams);
  } catch {
    setLink('offline', 'service unreachable');
  } finally {
    polling = false;
  }
}

function onHash() {
  let id = null;
  try {
    id = decodeURIComponent(window.location.hash.slice(1)) || null;
  } catch {
    // not an id: no live view
  }
  if (id !== selected && editor.dirty
      && !window.confirm(`Leave ${selected} with its lines, zones or masks not saved?`)) {
    window.history.replaceState(null, '', selected ? `#${encodeURIComponent(selected)}` : '#');
    return;
  }
  select(id);
}

function init() {
  initToken(poll);
  editor = new ShapeEditor($('live-overlay'), onEdited);
  document.querySelectorAll('.tools button').forEach((b) => {
    b.addEventListener('click', () => onTool(b.dataset.tool));
  });
  $('save').addEventListener('click', onSave);
  $('revert').addEventListener('click', () => editor.revert());
  $('live-close').addEventListener('click', () => { window.location.hash = ''; });
  $('add-form').addEventListener('submit', onAdd);
  window.addEventListener('hashchange', onHash);
  window.addEventListener('beforeunload', (e) => {
    if (editor.dirty || editor.draft) e.preventDefault(); // the browser asks before leaving
  });
  $('live-remove').addEventListener('click', onRemove);
  $('live-heatmap').addEventListener('click', onHeatmap);
  window.addEventListener('resize', () => editor.render());
  onHash();
  poll();
  setInterval(poll, POLL_MS);
  setInterval(() => tiles.forEach((entry, id) => refreshTile(id, entry)), GRID_PICTURE_MS);
  setInterval(refreshLive, LIVE_PICTURE_MS);
}

init();
