// Formatting, and the small latency charts of the dashboard drawn on <canvas>: three lines
// against time is all the page needs, so it vendors no chart library.

const LINES = ['p99', 'p95', 'p50']; // drawn in this order, so p50 ends up on top
export const HISTORY_MS = 5 * 60 * 1000;
const MIN_SPAN_MS = 20_000;
const LABEL_PX = 12;

// ---- formatting -------------------------------------------------------------------------
export function fmtMs(v) {
  if (v === null || v === undefined) return '–';
  if (v < 1) return v.toFixed(2);
  if (v < 10) return v.toFixed(1);
  return String(Math.round(v));
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return '–';
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${fmtMs(ms)} ms`;
}

// ---- history and charts -----------------------------------------------------------------
// One series per stage or stream, trimmed to HISTORY_MS: the API only knows "now".
export function record(map, key, ms, t) {
  let series = map.get(key);
  if (!series) map.set(key, (series = []));
  series.push({ t, p50: ms.p50, p95: ms.p95, p99: ms.p99 });
  while (series.length && series[0].t < t - HISTORY_MS) series.shift();
  return series;
}

function niceCeil(v) {
  if (!(v > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(v));
  return [1, 1.5, 2, 3, 4, 5, 6, 8, 10].map((m) => m * step).find((c) => c >= v);
}

// One value per sample (a zone's occupancy, say), trimmed to HISTORY_MS like `record`.
export function recordValue(map, key, name, value, t) {
  let series = map.get(key);
  if (!series) map.set(key, (series = []));
  series.push({ t, [name]: value });
  while (series.length && series[0].t < t - HISTORY_MS) series.shift();
  return series;
}

// Lines of p50/p95/p99 (or `lines`, each coloured by the CSS variable of its name) against
// time over the last HISTORY_MS; gaps where a value is null; `unit` beside the top value.
export function drawChart(canvas, series, now, { lines = LINES, unit = 'ms' } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width;
  const h = canvas.clientHeight || canvas.height;
  if (canvas.width !== Math.round(w * dpr)) canvas.width = Math.round(w * dpr);
  if (canvas.height !== Math.round(h * dpr)) canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const values = series.flatMap((s) => lines.map((k) => s[k])).filter((v) => v !== null);
  const top = niceCeil(Math.max(0, ...values));
  // The time axis grows with the history up to HISTORY_MS, so a fresh page does not squeeze
  // its first seconds into the right edge.
  const span = Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, series.length ? now - series[0].t : 0));
  const x = (t) => ((t - (now - span)) / span) * (w - 3) + 1;
  const y = (v) => h - 1 - (v / top) * (h - LABEL_PX - 2); // labels sit above the plot
  ctx.strokeStyle = '#e3e6ea';
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (const v of [0, top / 2, top]) {
    ctx.moveTo(0, Math.round(y(v)) + 0.5);
    ctx.lineTo(w, Math.round(y(v)) + 0.5);
  }
  ctx.stroke();
  for (const key of lines) {
    const colour = getComputedStyle(canvas).getPropertyValue(`--${key}`).trim() || '#333';
    ctx.strokeStyle = ctx.fillStyle = colour;
    ctx.lineWidth = key === 'p50' ? 1.6 : 1.1;
    ctx.beginPath();
    let pen = false;
    for (const s of series) {
      if (s[key] === null) { pen = false; continue; }
      if (pen) ctx.lineTo(x(s.t), y(s[key])); else ctx.moveTo(x(s.t), y(s[key]));
      pen = true;
    }
    ctx.stroke();
    const last = series[series.length - 1];
    if (last && last[key] !== null) ctx.fillRect(x(last.t) - 1.5, y(last[key]) - 1.5, 3, 3);
  }
  ctx.fillStyle = '#6b7280';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textAlign = 'left';
  ctx.fillText(`${fmtMs(top)} ${unit}`.trim(), 1, 9);
  ctx.textAlign = 'right';
  ctx.fillText(span < 90_000 ? `last ${Math.round(span / 1000)} s`
    : `last ${Math.round(span / 60_000)} min`, w - 1, 9);
  canvas.dataset.samples = String(series.length);
}
