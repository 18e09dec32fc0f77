// A stream's lines, zones and motion masks drawn over its picture in an <svg> whose viewBox
// is the picture's pixels (the API's coordinates), each named with its counts. Labels are
// sized in screen pixels, so they read the same on a thumbnail and on the large view.

const SVG = 'http://www.w3.org/2000/svg';
const LABEL_PX = 13;

export function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// The picture's size in its own pixels, as the overlay's viewBox says; null before a frame.
export function pictureSize(overlay) {
  const box = overlay.viewBox && overlay.viewBox.baseVal;
  return box && box.width ? { width: box.width, height: box.height } : null;
}

// Picture pixels per screen pixel (the overlay keeps the picture's aspect ratio: "meet").
export function pixelsPerScreenPixel(overlay) {
  const size = pictureSize(overlay);
  const rect = overlay.getBoundingClientRect();
  if (!size || !rect.width || !rect.height) return 1;
  return Math.max(size.width / rect.width, size.height / rect.height);
}

// A stream's shapes as the API shows it (`GET /api/streams/{id}`, `/api/stats`).
export function shapesOf(stream) {
  const analytics = stream.analytics || { lines: [], zones: [] };
  return { lines: analytics.lines, zones: analytics.zones, masks: stream.masks || [] };
}

export function lineCounts(counts, name) {
  const c = (counts && counts.lines[name]) || {};
  return { in: c.in ?? 0, out: c.out ?? 0 };
}

export function zoneCounts(counts, name) {
  const c = (counts && counts.zones[name]) || {};
  return { occupancy: c.occupancy ?? 0, entered: c.entered ?? 0, exited: c.exited ?? 0 };
}

function label(x, y, text, unit, className) {
  return svg('text', { x, y, class: `label ${className}`, 'font-size': LABEL_PX * unit,
    'stroke-width': 3 * unit }, text);
}

// Which side counts "in" (pipelines/analytics/config.py LineConfig): from the right-hand side
// of the line walked from its first point to its second, y down. An arrow at its middle.
function inArrow(points, unit) {
  const [x1, y1, x2, y2] = points;
  const length = Math.hypot(x2 - x1, y2 - y1) || 1;
  // the left-hand normal of (dx, dy) with y down is (dy, -dx): "in" points that way
  const nx = (y2 - y1) / length;
  const ny = -(x2 - x1) / length;
  const mx = (x1 + x2) / 2;
  const my = (y1 + y2) / 2;
  const size = 14 * unit;
  const tip = [mx + nx * size, my + ny * size];
  const back = [mx - nx * size * 0.2, my - ny * size * 0.2];
  const wing = 0.45 * size;
  const left = [back[0] - ny * wing, back[1] + nx * wing];
  const right = [back[0] + ny * wing, back[1] - nx * wing];
  return svg('polygon', { class: 'in-arrow', points: [tip, left, right].map((p) => p.join(',')).join(' ') });
}

// Everything drawn afresh: `shapes` {lines, zones, masks} as the API gives them, `counts`
// the stream's (or null), `selected` the name of the shape to highlight.
export function drawShapes(overlay, shapes, counts, selected = null) {
  const unit = pixelsPerScreenPixel(overlay);
  const drawn = [];
  for (const mask of shapes.masks || []) {
    const points = mask.polygon.map((p) => p.join(',')).join(' ');
    drawn.push(svg('polygon', { class: `mask${mask.name === selected ? ' selected' : ''}`,
      points, 'data-name': mask.name }));
    const [x, y] = mask.polygon[0];
    drawn.push(label(x, y, `mask ${mask.name}`, unit, 'mask-label'));
  }
  for (const zone of shapes.zones || []) {
    const points = zone.polygon.map((p) => p.join(',')).join(' ');
    drawn.push(svg('polygon', { class: `zone${zone.name === selected ? ' selected' : ''}`,
      points, 'data-name': zone.name }));
    const c = zoneCounts(counts, zone.name);
    const top = zone.polygon.reduce((a, b) => (b[1] < a[1] ? b : a));
    drawn.push(label(top[0], Math.max(top[1] - 4 * unit, LABEL_PX * unit), `${zone.name} `
      + `${c.occupancy} in now · ${c.entered} entered`, unit, 'zone-label'));
  }
  for (const line of shapes.lines || []) {
    const [x1, y1, x2, y2] = line.points;
    drawn.push(svg('line', { class: `line${line.name === selected ? ' selected' : ''}`,
      x1, y1, x2, y2, 'data-name': line.name }));
    drawn.push(inArrow(line.points, unit));
    const c = lineCounts(counts, line.name);
    drawn.push(label((x1 + x2) / 2 + 8 * unit, (y1 + y2) / 2,
      `${line.name} in ${c.in} out ${c.out}`, unit, 'line-label'));
  }
  overlay.replaceChildren(...drawn);
  return unit;
}
