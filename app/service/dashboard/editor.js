// Lines, zones and motion masks drawn and edited with the mouse on a stream's live picture.
//
// A line: press where it starts and release where it ends (or click twice). A zone or a mask:
// click each corner, then click its first corner again, double-click, or press Enter (Escape
// gives up and puts the tool down). Any corner or end is moved by dragging it. Nothing reaches
// the service until the page saves `shapes` (cameras.js: PUT .../analytics, which replaces the
// stream's lines, zones and masks; a line or zone left as it was keeps its counts there).
import { drawShapes, pictureSize, pixelsPerScreenPixel, shapesOf, svg } from './shapes.js';

const CLOSE_PX = 10; // a click this near a zone's first corner closes it
const DRAG_PX = 5; // a press released further than this drew a line by dragging
const DOUBLE_MS = 400; // two presses this close in time and place: a double-click

const clone = (shapes) => JSON.parse(JSON.stringify(shapes));

export class ShapeEditor {
  // `overlay`: the <svg> over the picture; `onChange(editor)`: after every edit.
  constructor(overlay, onChange) {
    this.overlay = overlay;
    this.onChange = onChange;
    this.shapes = { lines: [], zones: [], masks: [] };
    this.saved = clone(this.shapes);
    this.counts = null;
    this.tool = null; // 'line', 'zone', 'mask' or null (select and drag)
    this.draft = null; // {kind, points, at (the pointer)}
    this.drag = null; // {list, index, corner}
    this.selected = null;
    this.pending = null; // the name the next shape takes
    this.lastPress = null; // {t, p}: a double-click is told by time and place, since each
    // press redraws the shapes and the browser sends no dblclick for a replaced element
    overlay.addEventListener('pointerdown', (e) => this.onDown(e));
    overlay.addEventListener('pointermove', (e) => this.onMove(e));
    overlay.addEventListener('pointerup', (e) => this.onUp(e));
    // a drag the system took away (a touch cancelled, the window left) ends where it was
    overlay.addEventListener('lostpointercapture', () => this.onLost());
    document.addEventListener('keydown', (e) => this.onKey(e));
  }

  get dirty() {
    return JSON.stringify(this.shapes) !== JSON.stringify(this.saved);
  }

  // The stream as the API shows it: its shapes, unless the user has edits not yet saved.
  load(stream) {
    const shapes = shapesOf(stream);
    this.counts = stream.analytics ? stream.analytics.counts : null;
    const editing = this.dirty || this.draft || this.drag;
    this.saved = clone(shapes);
    if (!editing) this.shapes = clone(shapes);
    this.render();
  }

  // The stream as the service answered a save of `sent`: its shapes are the saved ones now,
  // and the ones shown unless the user edited on while the save was on its way.
  accept(stream, sent) {
    const shown = shapesOf(stream);
    const editedSince = JSON.stringify(this.shapes) !== JSON.stringify(sent);
    this.saved = clone(shown);
    if (!editedSince && !this.draft && !this.drag) this.shapes = clone(shown);
    this.counts = stream.analytics ? stream.analytics.counts : null;
    this.render();
  }

  setTool(tool, name) {
    this.tool = tool;
    this.pending = name;
    this.draft = null;
    this.overlay.dataset.tool = tool || '';
    this.render();
  }

  remove(kind, name) {
    this.shapes[kind] = this.shapes[kind].filter((s) => s.name !== name);
    this.changed();
  }

  revert() {
    this.shapes = clone(this.saved);
    this.setTool(null);
    this.changed();
  }

  // ---- the pointer ------------------------------------------------------------------------
  // A pointer event in the picture's pixels, rounded and kept inside the picture.
  at(event) {
    const size = pictureSize(this.overlay);
    const point = this.overlay.createSVGPoint();
    point.x = event.clientX;
    point.y = event.clientY;
    const p = point.matrixTransform(this.overlay.getScreenCTM().inverse());
    const clamp = (v, hi) => Math.min(hi, Math.max(0, Math.round(v)));
    return [clamp(p.x, size.width), clamp(p.y, size.height)];
  }

  near(a, b) {
    const unit = pixelsPerScreenPixel(this.overlay);
    return Math.hypot(a[0] - b[0], a[1] - b[1]) <= CLOSE_PX * unit;
  }

  onDown(event) {
    if (!pictureSize(this.overlay) || event.button !== 0) return;
    event.preventDefault(); // no text selection, and no focus change: the picture takes it
    this.overlay.focus({ preventScroll: true }); // so Enter and Escape are the editor's
    const p = this.at(event);
    const handle = event.target.dataset && event.target.dataset.corner;
    if (handle !== undefined && !this.draft) {
      const [list, index, corner] = handle.split(':');
      this.drag = { list, index: Number(index), corner: Number(corner) };
      this.overlay.setPointerCapture(event.pointerId);
      return;
    }
    if (this.tool === 'line') {
      if (!this.draft) {
        this.draft = { kind: 'line', points: [p], at: p, pressedAt: p };
        this.overlay.setPointerCapture(event.pointerId); // released outside: still ours
      } else this.finishLine(p);
    } else if (this.tool === 'zone' || this.tool === 'mask') {
      const last = this.lastPress;
      const double = last && event.timeStamp - last.t < DOUBLE_MS && this.near(p, last.p);
      this.lastPress = { t: event.timeStamp, p };
      if (!this.draft) this.draft = { kind: this.tool, points: [p], at: p };
      else if (double || (this.draft.points.length >= 3 && this.near(p, this.draft.points[0]))) {
        this.finishPolygon();
        return;
      } else this.draft.points.push(p);
    } else {
      this.selected = event.target.dataset && event.target.dataset.name || null;
    }
    this.render();
  }

  onMove(event) {
    if (!pictureSize(this.overlay)) return;
    const p = this.at(event);
    if (this.drag) {
      const shape = this.shapes[this.drag.list][this.drag.index];
      if (this.drag.list === 'lines') {
        shape.points.splice(2 * this.drag.corner, 2, p[0], p[1]);
      } else shape.polygon[this.drag.corner] = p;
      this.render();
    } else if (this.draft) {
      this.draft.at = p;
      this.render();
    }
  }

  onUp(event) {
    if (this.drag) {
      this.drag = null;
      this.changed();
      return;
    }
    const draft = this.draft;
    if (draft && draft.kind === 'line' && draft.pressedAt) {
      const p = this.at(event);
      const moved = Math.hypot(p[0] - draft.pressedAt[0], p[1] - draft.pressedAt[1]);
      if (moved > DRAG_PX * pixelsPerScreenPixel(this.overlay)) this.finishLine(p);
      else draft.pressedAt = null; // a click: the next click ends the line
    }
  }

  // After pointerup (nothing left to do) or when the system cancels the pointer: a drag ends
  // where it was; a line being pressed waits for its second click.
  onLost() {
    if (this.drag) {
      this.drag = null;
      this.changed();
    }
    if (this.draft && this.draft.pressedAt) this.draft.pressedAt = null;
  }

  onKey(event) {
    // keys typed in a field (the shape's name, the Add form) are the field's
    if (!(this.draft || this.tool) || event.target.closest('input, textarea, select, button')) {
      return;
    }
    if (event.key === 'Escape') {
      event.preventDefault();
      this.draft = null;
      this.tool = null; // the tool too: the next click selects, it draws nothing
      this.overlay.dataset.tool = '';
      this.changed();
    } else if (event.key === 'Enter') {
      event.preventDefault();
      this.finishPolygon();
    }
  }

  // ---- finishing a shape -------------------------------------------------------------------
  finishLine(end) {
    const [start] = this.draft.points;
    this.draft = null;
    if (start[0] === end[0] && start[1] === end[1]) return this.render();
    this.shapes.lines = this.shapes.lines.filter((l) => l.name !== this.pending);
    this.shapes.lines.push({ name: this.pending, points: [...start, ...end] });
    this.finished();
  }

  finishPolygon() {
    const draft = this.draft;
    if (!draft || draft.kind === 'line') return;
    // a double-click's two clicks each left a corner: one is enough
    const points = draft.points.filter((p, i) => i === 0 || !this.near(p, draft.points[i - 1]));
    if (points.length < 3) return;
    this.draft = null;
    const list = draft.kind === 'zone' ? 'zones' : 'masks';
    this.shapes[list] = this.shapes[list].filter((s) => s.name !== this.pending);
    this.shapes[list].push({ name: this.pending, polygon: points });
    this.finished();
  }

  finished() {
    this.selected = this.pending;
    this.tool = null;
    this.overlay.dataset.tool = '';
    this.changed();
  }

  changed() {
    this.render();
    if (this.onChange) this.onChange(this);
  }

  // ---- drawing -------------------------------------------------------------------------------
  render() {
    if (!pictureSize(this.overlay)) return;
    const unit = drawShapes(this.overlay, this.shapes, this.counts, this.selected);
    const radius = 5 * unit;
    const handles = [];
    this.shapes.lines.forEach((line, i) => [0, 1].forEach((c) => handles.push(svg('circle', {
      class: 'corner', cx: line.points[2 * c], cy: line.points[2 * c + 1], r: radius,
      'data-corner': `lines:${i}:${c}` }))));
    for (const list of ['zones', 'masks']) {
      this.shapes[list].forEach((shape, i) => shape.polygon.forEach(([x, y], c) => handles.push(
        svg('circle', { class: 'corner', cx: x, cy: y, r: radius, 'data-corner': `${list}:${i}:${c}` }))));
    }
    if (this.draft) {
      const points = [...this.draft.points, this.draft.at];
      handles.push(svg('polyline', { class: `draft ${this.draft.kind}`,
        points: points.map((p) => p.join(',')).join(' ') }));
      this.draft.points.forEach(([x, y]) => handles.push(svg('circle',
        { class: 'corner draft', cx: x, cy: y, r: radius })));
    }
    this.overlay.append(...handles);
  }
}
