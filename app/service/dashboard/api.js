// What every page of the dashboard shares: the API token (kept for the browser session only),
// requests with it, the API's error text, media fetched with it, and small DOM helpers.

const TOKEN_KEY = 'vidpipe.apiToken';

export const $ = (id) => document.getElementById(id);

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// The header's token field (id "token"), filled from and saved to the browser session.
export function initToken(onChange) {
  const token = $('token');
  token.value = sessionStorage.getItem(TOKEN_KEY) || '';
  token.addEventListener('change', () => {
    sessionStorage.setItem(TOKEN_KEY, token.value.trim());
    token.classList.remove('needed');
    if (onChange) onChange();
  });
}

// The service answered 401: the field is marked; the words say whether one was given.
export function needToken() {
  $('token').classList.add('needed');
  return $('token').value.trim() ? 'API token refused' : 'API token needed';
}

// With a token set on the service every data route needs it, media and the event feed too.
export function authHeaders() {
  const token = $('token').value.trim();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

export function api(method, path, body) {
  const headers = authHeaders();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  return fetch(path, { method, headers, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body) });
}

// The API answers {"detail": "..."} or, for a malformed body, a list of {loc, msg}.
export async function errorText(response) {
  try {
    const { detail } = await response.json();
    if (Array.isArray(detail)) {
      return detail.map((d) => `${d.loc.filter((p) => p !== 'body').join('.')}: ${d.msg}`).join('; ');
    }
    if (detail) return String(detail);
  } catch {
    // not JSON: fall through to the status line
  }
  return `${response.status} ${response.statusText}`;
}

// Media need the token too: fetched, then shown from a blob URL (the caller revokes it).
export async function mediaUrl(path) {
  const r = await fetch(path, { cache: 'no-store', headers: authHeaders() });
  if (!r.ok) throw new Error(`HTTP ${r.status}`);
  return URL.createObjectURL(await r.blob());
}

// An ended object's best snapshot, fetched with the token: `<prefix>-snapshot`, marked
// loaded once shown; `onGone()` when it cannot be had (removed past the retention).
export function eventSnapshot(e, prefix, onGone) {
  const img = el('img');
  img.alt = `${e.class} at its best`;
  img.dataset.testid = `${prefix}-snapshot`;
  mediaUrl(e.snapshot).then((url) => {
    img.onload = () => {
      img.dataset.loaded = 'true';
      URL.revokeObjectURL(url); // drawn: the page keeps the picture, not the blob
    };
    img.src = url;
  }).catch(() => onGone(img));
  return img;
}

// A button that plays an event's clip in its place, fetched with the token; `onPlay(video)`
// once it plays.
export function clipButton(e, prefix, onPlay) {
  const button = el('button', 'clip', 'play clip');
  button.type = 'button';
  button.dataset.testid = `${prefix}-clip`;
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      const video = el('video');
      Object.assign(video, { controls: true, muted: true });
      video.dataset.testid = `${prefix}-video`;
      video.src = await mediaUrl(e.clip);
      if (onPlay) onPlay(video);
      button.replaceWith(video);
      video.play().catch(() => {});
    } catch (error) {
      button.textContent = `clip unavailable (${error.message})`;
    }
  });
  return button;
}

// An event (vidpipe.event/1) in a few words: its stream, object, line or zone, and figure.
export function eventText(e, withStream = true) {
  const what = e.class ? `${e.class}${e.track_id != null ? ` #${e.track_id}` : ''}` : '';
  const where = e.line ? `line ${e.line} ${e.direction}` : e.zone ? `zone ${e.zone}` : '';
  const extra = e.type === 'end' ? `${e.duration_s.toFixed(1)} s` :
    e.dwell_s != null ? `dwell ${e.dwell_s.toFixed(1)} s` :
    e.occupancy != null ? `${e.occupancy} inside` : '';
  return [withStream ? e.stream : '', what, where, extra].filter(Boolean).join(' · ');
}

// An event's time (UTC, ISO 8601) as the browser's local wall-clock time.
export function localTime(iso, withDate = false) {
  const t = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  const time = `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}`;
  return withDate ? `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ${time}`
    : time;
}

// Why a camera is not up, from its source: the last failure, the attempts, the next retry.
export function whyDown(stream) {
  if (!stream.reason) return '';
  const attempts = stream.attempts === 1 ? '1 attempt' : `${stream.attempts} attempts`;
  const retry = stream.next_retry_at
    ? `, next in ${Math.max(0, stream.next_retry_at - Date.now() / 1000).toFixed(0)} s` : '';
  return `${stream.reason} (${attempts}${retry})`;
}

// A stream's latest picture (boxes and track ids drawn by the service; `picture`
// 'heatmap.png': where its tracked objects were) into `img`, one request at a time, and
// `overlay`'s viewBox set to its pixels (the shapes' coordinates); false while it has none
// (204) or the service does not answer.
export async function loadSnapshot(streamId, img, overlay, holder, picture = 'snapshot.jpg') {
  if (holder.loading || document.hidden) return false;
  holder.loading = true;
  try {
    const r = await fetch(`/api/streams/${encodeURIComponent(streamId)}/${picture}`,
      { cache: 'no-store', headers: authHeaders() });
    if (!r.ok || r.status === 204) return false;
    const url = URL.createObjectURL(await r.blob());
    try {
      await new Promise((resolve, reject) => {
        img.onload = resolve;
        img.onerror = reject;
        img.src = url;
      });
    } catch (error) {
      URL.revokeObjectURL(url); // not a picture: not kept
      throw error;
    }
    if (holder.objectUrl) URL.revokeObjectURL(holder.objectUrl);
    holder.objectUrl = url;
    img.dataset.loaded = 'true';
    const box = `0 0 ${img.naturalWidth} ${img.naturalHeight}`;
    if (overlay.getAttribute('viewBox') !== box) overlay.setAttribute('viewBox', box);
    return true;
  } catch {
    return false; // unreachable: the page's link indicator says so; tried again next tick
  } finally {
    holder.loading = false;
  }
}
