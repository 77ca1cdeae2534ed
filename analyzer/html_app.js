/* html_app.js — the script of the page `poolscope html` writes.
 *
 * analyzer/html.c inlines this file (and html_app.css) into every page, with
 * the trace's aggregates as JSON in <script id="ps-data">. No library: the
 * figures are a few SVG primitives (step lines, bars, rectangles), which a
 * page of our own draws in less code than it would take to adapt a charting
 * or flame-graph library, and the page must work with no network and no
 * dependency to vendor. Everything is built with DOM calls and textContent,
 * never innerHTML with data (once with a constant, to learn the SVG namespace), so no
 * string of the trace is ever read as markup.
 *
 * State: the view (the time range shown, shared by every time chart), the
 * selection (a range: the flame graph shows what was allocated in it), the
 * cursor (an instant: the second flame graph shows what is live then).
 * Times are ns since the trace's first event.
 */
(function () {
  'use strict';
  const t_start = performance.now();
  const D = JSON.parse(document.getElementById('ps-data').textContent);
  /* the SVG namespace, from the HTML parser itself (the file names no URL at all) */
  const SVGNS = (() => { const t = document.createElement('template'); t.innerHTML = '<svg></svg>'; return t.content.firstChild.namespaceURI; })();
  /* row kinds (html.c's K_*): mappings by committed bytes, anonymous and file-backed apart */
  const KIND_NAME = ['heap', 'pool', 'KV', 'mmap', 'files'];
  const KIND_LONG = ['heap (malloc family)', 'pool acquires', 'KV blocks', 'mmap anonymous (committed)', 'mmap file-backed'];
  const KIND_TABLE = ['heap', 'pool ', 'KV ', 'mmap anonymous', 'mmap file-backed'];
  const hasPool = k => k === 1 || k === 2;   /* rows named by their pool */

  /* ---- formatting ------------------------------------------------------------ */
  function sig3(x) {
    const a = Math.abs(x);
    return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2);
  }
  function fmtBytes(v) {
    if (v == null || !isFinite(v)) return '-';
    if (Math.abs(v) < 1024) return Math.round(v) + ' B';
    const u = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    let x = v / 1024, i = 0;
    while (Math.abs(x) >= 1024 && i < u.length - 1) { x /= 1024; i++; }
    return sig3(x) + ' ' + u[i];
  }
  function fmtNs(ns) {
    if (ns == null || !isFinite(ns)) return '-';
    const a = Math.abs(ns);
    if (a < 1e3) return Math.round(ns) + ' ns';
    if (a < 1e6) return sig3(ns / 1e3) + ' µs';
    if (a < 1e9) return sig3(ns / 1e6) + ' ms';
    return sig3(ns / 1e9) + ' s';
  }
  function fmtCount(v) { return v == null ? '-' : Math.round(v).toLocaleString('en-US'); }
  /* as the report's psc_fmt_share: a part short of the whole never reads 100.0% */
  function fmtPct(a, b) {
    if (!b) return '-';
    let t = (100 * a / b).toFixed(1);
    if (a < b && t === '100.0') t = '99.9';
    return t + '%';
  }
  function fmtRatio(v) { return v == null || !isFinite(v) ? '-' : v.toFixed(2) + '×'; }
  /* a count and its noun, "1 object" and "2 objects": every count label on
   * the page goes through here (tests/browser/story_check.js reads them all) */
  function nOf(n, one, many) { return fmtCount(n) + ' ' + (Math.round(n) === 1 ? one : many || one + 's'); }

  /* ---- DOM helpers ------------------------------------------------------------ */
  function el(tag, attrs, kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k in attrs) {
        const v = attrs[k];
        if (v == null || v === false) continue;
        if (k === 'text') e.textContent = v;
        else if (k === 'class') e.className = v;
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : v);
      }
    }
    if (kids) for (const c of kids) if (c != null) e.append(c);
    return e;
  }
  function sv(tag, attrs, parent) {
    const e = document.createElementNS(SVGNS, tag);
    if (attrs) for (const k in attrs) if (attrs[k] != null) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function svgText(parent, x, y, text, attrs) {
    const t = sv('text', Object.assign({ x: x, y: y }, attrs || {}), parent);
    t.textContent = text;
    return t;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }

  const tip = el('div', { class: 'tip', role: 'tooltip' });
  function showTip(ev, lines) {
    clear(tip);
    lines.forEach((l, i) => tip.append(el(i ? 'div' : 'b', { text: l })));
    tip.style.display = 'block';
    const pad = 14, r = tip.getBoundingClientRect();
    let x = ev.clientX + pad, y = ev.clientY + pad;
    if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - pad;
    if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - pad;
    tip.style.left = Math.max(2, x) + 'px';
    tip.style.top = Math.max(2, y) + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  function hashStr(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }

  /* ---- the data -------------------------------------------------------------- */
  const TL = D.tl, BW = TL.w, T0 = TL.t0, NB = TL.n, SBW = TL.w * D.site_sb;
  const DUR = Math.max(D.meta.duration, 1);
  const str = i => (i == null || i < 0 ? null : D.strings[i]);
  const FR = D.frames.map(f => ({
    name: str(f[0]) || '?', short: f[1] >= 0 ? str(f[1]) : (str(f[0]) || '?'),
    file: str(f[2]), line: f[3], inl: !!f[4], mod: str(f[5]), py: !!f[6],
  }));
  /* A C++ name as people read it: each template argument list folded to
   * <…> (analyzer/sites.h, az_sv_fold: the text report's rule); the whole
   * name is the element's title (hover) and in the stack a click opens. */
  function foldName(s) {
    if (!s || s.indexOf('<') < 0) return s;
    let o = '', depth = 0, paren = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s[i];
      if (depth && (c === '(' || c === ')')) { paren += c === '(' ? 1 : paren > 0 ? -1 : 0; continue; }
      if (paren && (c === '<' || c === '>')) continue;   /* a comparison in a decltype, or balanced */
      if (s.startsWith('operator', i) && (i === 0 || ': ~'.indexOf(s[i - 1]) >= 0)) {
        let k = i + 8;
        while (k < s.length && '<>=-'.indexOf(s[k]) >= 0) k++;
        if (!depth) o += s.slice(i, k);
        i = k - 1;
        continue;
      }
      if (c === '<' && !depth && s[i - 1] === ' ' && s[i + 1] === ' ') { o += c; continue; }   /* " < ": a caller */
      /* a template's list opens right after its name (sites.c, az_sv_fold):
       * Python's <module>, <locals>, <frozen ...> are not one */
      if (c === '<' && !depth && !(i > 0 && /[A-Za-z0-9_]/.test(s[i - 1]))) { o += c; continue; }
      if (c === '<') { if (!depth++) o += '<…'; continue; }
      if (c === '>' && depth) { if (!--depth) o += '>'; continue; }
      if (!depth) o += c;
    }
    return o;
  }
  function frameText(f) {
    let s = f.name;
    if (f.file) s += ' (' + f.file.replace(/^.*\//, '') + (f.line ? ':' + f.line : '') + ')';
    return s;
  }
  /* site rows: sparse bucket entries decoded, live at each entry's end */
  const SITES = D.sites;
  SITES.forEach((r, i) => {
    r.i = i;
    const b = r.b, n = b.length / 4;
    r.J = new Int32Array(n); r.AB = new Float64Array(n); r.AN = new Float64Array(n); r.LV = new Float64Array(n);
    let j = 0, live = 0;
    for (let e = 0; e < n; e++) {
      j += b[4 * e];
      r.J[e] = j; r.AB[e] = b[4 * e + 1]; r.AN[e] = b[4 * e + 2];
      live += b[4 * e + 1] - b[4 * e + 3];
      r.LV[e] = live;
    }
    delete r.b;
    r.frames = r.f.map(k => FR[k]);
    r.kindLabel = KIND_TABLE[r.k] + (hasPool(r.k) ? r.pool || '' : '');
    r.search = (r.label + ' ' + (r.via || '') + ' ' + r.kindLabel + ' ' +
                r.frames.map(f => f.name + ' ' + (f.file || '')).join(' ')).toLowerCase();
  });
  /* allocated bytes and allocations of a row over site buckets [ja, jb] */
  function rowAlloc(r, ja, jb) {
    let v = 0, n = 0;
    for (let e = 0; e < r.J.length; e++) {
      const j = r.J[e];
      if (j < ja) continue;
      if (j > jb) break;
      v += r.AB[e]; n += r.AN[e];
    }
    return [v, n];
  }
  /* live bytes of a row at the end of site bucket j */
  function rowLive(r, j) {
    let lo = 0, hi = r.J.length - 1, best = -1;
    while (lo <= hi) {
      const m = (lo + hi) >> 1;
      if (r.J[m] <= j) { best = m; lo = m + 1; } else hi = m - 1;
    }
    return best < 0 ? 0 : Math.max(0, r.LV[best]);
  }
  const sbOf = t => Math.max(0, Math.floor((t - T0) / SBW));
  const bucketOf = t => Math.min(NB - 1, Math.max(0, Math.floor((t - T0) / BW)));

  const BUFPOOLS = D.pools.filter(p => !p.kv);
  const KVPOOLS = D.pools.filter(p => p.kv);
  const HAS = {
    mmap: D.peaks.mmap_total > 0, rss: D.peaks.rss_samples > 0, pool: D.pool_totals.acquires > 0,
    kv: !!D.kv.has, reserved: D.peaks.mmap_reserved > 0,
  };
  const kindsPresent = [0, 1, 2, 3, 4].filter(k => SITES.some(r => r.k === k));

  /* ---- state ------------------------------------------------------------------- */
  const S = {
    v0: 0, v1: DUR,                   /* the view */
    sel: null,                        /* {t0, t1, label} */
    cursor: null,                     /* {t, mode: 'bucket' | 'heap' | 'rss' | 'kv'} */
    kinds: new Set(kindsPresent),
  };
  const views = [];                   /* what redraws when the view, cursor or selection moves */
  let raf = 0;
  function redraw() {
    if (raf) return;
    raf = requestAnimationFrame(() => { raf = 0; views.forEach(v => v()); });
  }
  function setView(a, b) {
    const minW = Math.max(1000, BW / 8);
    let w = Math.min(DUR, Math.max(minW, b - a));
    a = Math.max(0, Math.min(a, DUR - w));
    S.v0 = a; S.v1 = a + w;
    redraw();
  }
  function setSelection(t0, t1, label) {
    if (t0 > t1) [t0, t1] = [t1, t0];
    S.sel = { t0: Math.max(0, t0), t1: Math.min(DUR, t1), label: label || null };
    flameAlloc.reset();
    redraw();
  }
  function setCursor(t, mode, why) {
    S.cursor = { t: Math.max(0, Math.min(DUR, t)), mode: mode || 'bucket', why: why || null };
    if (S.cursor.t < S.v0 || S.cursor.t > S.v1) {
      const w = S.v1 - S.v0;
      setView(S.cursor.t - w / 2, S.cursor.t + w / 2);
    }
    flameLive.reset();
    redraw();
  }

  /* ---- time axis ------------------------------------------------------------------ */
  function timeTicks(a, b, px) {
    const span = b - a, want = Math.max(2, Math.floor(px / 90));
    const raw = Math.max(1, span / want), p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * p).find(s => s >= raw) || 10 * p;
    const unit = step < 1e3 ? [1, 'ns'] : step < 1e6 ? [1e3, 'µs'] : step < 1e9 ? [1e6, 'ms'] : [1e9, 's'];
    const dec = Math.max(0, Math.ceil(-Math.log10(step / unit[0]) + 1e-9));
    const out = [];
    for (let t = Math.ceil(a / step) * step; t <= b; t += step)
      out.push([t, (t / unit[0]).toFixed(dec) + ' ' + unit[1]]);
    return out;
  }
  /* four steps of a round size (1, 2, 2.5 or 5 times a power of ten) */
  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 2.5, 5, 10].map(m => m * p).find(x => x >= raw * (1 - 1e-9)) || 10 * p;
  }
  function byteTicks(max) {
    /* round steps in one binary unit, every label in it: 0, 500 KiB, 1000 KiB, ... */
    const units = [[1, 'B'], [1024, 'KiB'], [1048576, 'MiB'], [1073741824, 'GiB'], [1099511627776, 'TiB']];
    const raw = Math.max(max, 1) / 4;
    let u = units[0];
    for (const x of units) if (raw >= x[0]) u = x;
    const step = Math.max(1, niceStep(raw / u[0])) * u[0];
    const ticks = [];
    for (let i = 0; i <= 4; i++) ticks.push(step * i);
    const dec = step / u[0] % 1 ? 1 : 0;
    return { top: step * 4, ticks: ticks, fmt: v => (v / u[0]).toFixed(v ? dec : 0) + ' ' + u[1] };
  }
  function countTicks(max) {
    /* whole numbers for counts */
    let step = niceStep(Math.max(max, 1) / 4);
    if (step < 1) step = 1;
    if (step % 1) step = Math.ceil(step);
    const ticks = [];
    for (let i = 0; i <= 4; i++) ticks.push(step * i);
    return { top: step * 4, ticks: ticks };
  }

  /* ---- time charts --------------------------------------------------------------- */
  const ML = 170, MR = 64;            /* left margin (lane labels, axis), right margin (right axis) */
  const COLORS = {
    heap: '#1f77b4', committed: '#ff7f0e', reserved: '#ffbb78', anon: '#bcbd22', file: '#17becf',
    rss: '#d62728', pool_out: '#9467bd', pool_res: '#c5b0d5', kv_blocks: '#2ca02c', kv_util: '#8c564b',
    acq: '#aec7e8', miss: '#d62728', req: '#1f77b4', granted: '#ff7f0e',
  };
  const LANE_COLORS = ['#4c72b0', '#dd8452', '#55a868', '#c44e52', '#8172b3', '#937860', '#da8bc3', '#8c8c8c',
                       '#ccb974', '#64b5cd', '#2f4b7c', '#a05195', '#f95d6a', '#665191', '#ffa600', '#003f5c'];

  function sumPools(key) {
    const out = new Float64Array(NB);
    for (const p of BUFPOOLS) if (p[key]) for (let i = 0; i < NB; i++) out[i] += p[key][i];
    return out;
  }

  /* A time chart: an SVG of stacked tracks over the shared view. A track is
   * {title, height, kind: 'lines' | 'bars' | 'lanes', series, unit}. */
  function TimeChart(parent, tracks, opts) {
    opts = opts || {};
    const wrap = el('div', { class: 'chart' });
    const legend = el('div', { class: 'legend' });
    const svg = sv('svg', { class: 'timechart', role: 'img' });
    if (opts.id) svg.id = opts.id;
    wrap.append(legend, svg);
    parent.append(wrap);
    const all = [];
    tracks.forEach(tr => tr.series && tr.series.forEach(s => all.push(s)));
    all.forEach(s => {
      const sw = el('span', { class: 'sw' });
      sw.style.background = s.color;
      if (s.dash) sw.classList.add('dash');
      const item = el('button', { class: 'lg' + (s.off ? ' off' : ''), type: 'button', title: s.note || null,
                                  onclick: () => { s.off = !s.off; item.classList.toggle('off', !!s.off); redraw(); } },
                      [sw, s.label]);
      legend.append(item);
    });
    if (opts.note) legend.append(el('span', { class: 'lgnote', text: opts.note }));
    let geom = null;                  /* for the pointer handlers */
    let brushEl = null;

    function draw() {
      const width = Math.max(400, wrap.clientWidth || 900), PW = width - ML - MR;
      let y = 6;
      const lay = tracks.map(tr => {
        const h = tr.kind === 'lanes' ? lanesHeight(tr) : tr.height;
        const r = { tr: tr, y: y + 16, h: h };
        y += h + 16 + 10;
        return r;
      });
      const axisY = y;
      const height = axisY + 26;
      clear(svg);
      svg.setAttribute('width', width);
      svg.setAttribute('height', height);
      svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
      const a = S.v0, b = S.v1;
      const X = t => ML + (t - a) / (b - a) * PW;
      geom = { X: X, T: x => a + (x - ML) / PW * (b - a), PW: PW, axisY: axisY, height: height, lay: lay };
      const defs = sv('defs', null, svg);
      const clip = sv('clipPath', { id: (opts.id || 'c') + '-clip' }, defs);
      sv('rect', { x: ML, y: 0, width: PW, height: height }, clip);
      /* x grid and axis */
      const ticks = timeTicks(a, b, PW);
      const grid = sv('g', { class: 'grid' }, svg);
      sv('rect', { class: 'axisstrip', x: ML, y: axisY, width: PW, height: 26 }, svg);
      for (const [t, lab] of ticks) {
        const x = X(t);
        sv('line', { x1: x, x2: x, y1: 6, y2: axisY }, grid);
        svgTextAxis(svg, x, axisY + 16, lab);
      }
      sv('line', { class: 'axis', x1: ML, x2: ML + PW, y1: axisY, y2: axisY }, svg);
      for (const L of lay) {
        const g = sv('g', { class: 'track', 'data-title': L.tr.title }, svg);
        svgText(g, 4, L.y - 5, L.tr.title, { class: 'ttitle' });
        if (L.tr.kind === 'lanes') drawLanes(g, L, X, PW, a, b, opts.id);
        else drawSeries(g, L, X, PW, a, b, opts.id);
      }
      /* selection and cursor over everything */
      if (S.sel) {
        const x0 = Math.max(ML, X(S.sel.t0)), x1 = Math.min(ML + PW, X(S.sel.t1));
        if (x1 >= ML && x0 <= ML + PW) {
          const r = sv('rect', { class: 'selrect', x: x0, y: 6, width: Math.max(1, x1 - x0), height: axisY - 6 }, svg);
          if (opts.id === 'ps-timeline') { r.id = 'ps-selection'; r.setAttribute('data-t0', S.sel.t0); r.setAttribute('data-t1', S.sel.t1); }
        }
      }
      if (S.cursor && S.cursor.t >= a && S.cursor.t <= b) {
        const x = X(S.cursor.t);
        const c = sv('line', { class: 'cursor', x1: x, x2: x, y1: 4, y2: axisY }, svg);
        if (opts.id === 'ps-timeline') { c.id = 'ps-cursor'; c.setAttribute('data-t', S.cursor.t); }
      }
      brushEl = sv('rect', { class: 'brush', x: 0, y: 6, width: 0, height: axisY - 6, visibility: 'hidden' }, svg);
    }
    function svgTextAxis(g, x, y, t) { svgText(g, x, y, t, { class: 'tick', 'text-anchor': 'middle' }); }

    /* pointer: drag selects, shift+drag or a drag on the axis strip pans,
     * a click places the cursor or selects a marker scope; wheel zooms */
    let drag = null;
    svg.addEventListener('pointerdown', ev => {
      if (ev.button !== 0 || !geom) return;
      const r = svg.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      if (x < ML - 4) return;
      const pan = ev.shiftKey || y >= geom.axisY;
      drag = { x0: x, x: x, pan: pan, moved: false, target: ev.target, v0: S.v0, v1: S.v1 };
      svg.setPointerCapture(ev.pointerId);
      ev.preventDefault();
    });
    svg.addEventListener('pointermove', ev => {
      if (!geom) return;
      const r = svg.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      if (!drag) { hover(ev, x, y); return; }
      drag.x = x;
      if (Math.abs(x - drag.x0) > 3) drag.moved = true;
      if (!drag.moved) return;
      hideTip();
      if (drag.pan) {
        const dt = (x - drag.x0) / geom.PW * (drag.v1 - drag.v0);
        setView(drag.v0 - dt, drag.v1 - dt);
      } else if (brushEl) {
        const xa = Math.max(ML, Math.min(drag.x0, x)), xb = Math.min(ML + geom.PW, Math.max(drag.x0, x));
        brushEl.setAttribute('x', xa);
        brushEl.setAttribute('width', Math.max(0, xb - xa));
        brushEl.setAttribute('visibility', 'visible');
      }
    });
    svg.addEventListener('pointerup', ev => {
      if (!drag || !geom) return;
      const d = drag;
      drag = null;
      if (d.pan) { if (!d.moved) setCursor(geom.T(d.x0)); return; }
      if (d.moved) {
        const ta = geom.T(Math.max(ML, Math.min(d.x0, d.x))), tb = geom.T(Math.min(ML + geom.PW, Math.max(d.x0, d.x)));
        if (tb > ta) setSelection(ta, tb, null);
        return;
      }
      const it = d.target && d.target.getAttribute && d.target.getAttribute('data-item');
      if (it != null) { selectItem(d.target); return; }
      setCursor(geom.T(d.x0));
    });
    svg.addEventListener('pointerleave', hideTip);
    svg.addEventListener('dblclick', ev => {
      ev.preventDefault();
      if (S.sel && S.sel.t1 > S.sel.t0) setView(S.sel.t0, S.sel.t1); else setView(0, DUR);
    });
    svg.addEventListener('wheel', ev => {
      if (!geom) return;
      ev.preventDefault();
      const r = svg.getBoundingClientRect(), x = Math.max(ML, Math.min(ML + geom.PW, ev.clientX - r.left));
      const w = S.v1 - S.v0;
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        const d = (ev.shiftKey ? ev.deltaY : ev.deltaX) / geom.PW * w;
        setView(S.v0 + d, S.v1 + d);
        return;
      }
      const t = geom.T(x), f = Math.exp(Math.max(-1, Math.min(1, ev.deltaY * (ev.deltaMode ? 0.05 : 0.0015))));
      setView(t - (t - S.v0) * f, t + (S.v1 - t) * f);
    }, { passive: false });

    function hover(ev, x, y) {
      if (x < ML || x > ML + geom.PW || y > geom.axisY) { hideTip(); return; }
      const tgt = ev.target;
      if (tgt && tgt.getAttribute && tgt.getAttribute('data-item') != null) { hideTip(); itemTip(ev, tgt); return; }
      const t = geom.T(x), k = bucketOf(t);
      const L = geom.lay.find(l => y >= l.y - 16 && y <= l.y + l.h);
      if (!L || L.tr.kind === 'lanes') { hideTip(); return; }
      const lines = ['at ' + fmtNs(t) + ' (bucket of ' + fmtNs(BW) + ', maxima)'];
      for (const s of L.tr.series) if (!s.off) lines.push(s.label + ': ' + s.fmt(s.v[k]));
      showTip(ev, lines);
    }
    views.push(draw);
    window.addEventListener('resize', redraw);
    return { svg: svg, draw: draw };
  }

  function drawSeries(g, L, X, PW, a, b, id) {
    const tr = L.tr, on = tr.series.filter(s => !s.off);
    const kA = Math.max(0, Math.floor((a - T0) / BW)), kB = Math.min(NB - 1, Math.floor((b - T0) / BW));
    let maxL = 0, maxR = 0;
    for (const s of on) for (let k = kA; k <= kB; k++) {
      const v = s.v[k];
      if (s.right) { if (v > maxR) maxR = v; } else if (v > maxL) maxL = v;
    }
    const tl = tr.unit === 'bytes' ? byteTicks(maxL) : countTicks(maxL);
    const tR = tr.rightUnit === 'pct' ? { top: 100, ticks: [0, 25, 50, 75, 100] } : countTicks(maxR);
    const Y = v => L.y + L.h - (v / tl.top) * L.h;
    const YR = v => L.y + L.h - (v / tR.top) * L.h;
    const grid = sv('g', { class: 'grid' }, g);
    const leftAxis = tr.series.some(s => !s.right);
    /* a lane under 80 px names every other grid line, so labels keep apart */
    const named = i => L.h >= 80 || i % 2 === 0;
    (leftAxis ? tl : tR).ticks.forEach((v, i) => {
      const y = leftAxis ? Y(v) : YR(v);
      sv('line', { x1: ML, x2: ML + PW, y1: y, y2: y }, grid);
      if (leftAxis && named(i)) svgText(g, ML - 6, y + 4, tl.fmt ? tl.fmt(v) : fmtCount(v), { class: 'tick', 'text-anchor': 'end' });
    });
    if (tr.series.some(s => s.right))
      tR.ticks.forEach((v, i) => {
        if (named(i)) svgText(g, ML + PW + 6, YR(v) + 4, tr.rightUnit === 'pct' ? v + '%' : fmtCount(v), { class: 'tick' });
      });
    sv('rect', { class: 'frame', x: ML, y: L.y, width: PW, height: L.h }, g);
    const cg = sv('g', { 'clip-path': 'url(#' + (id || 'c') + '-clip)' }, g);
    for (const s of on) {
      const YY = s.right ? YR : Y;
      if (tr.kind === 'bars') {
        let d = '';
        for (let k = kA; k <= kB; k++) {
          const v = s.v[k];
          if (!v) continue;
          const x0 = X(T0 + k * BW), x1 = X(T0 + (k + 1) * BW), y = YY(v);
          d += 'M' + x0.toFixed(1) + ' ' + (L.y + L.h) + 'V' + y.toFixed(1) + 'H' + Math.max(x0 + 0.8, x1 - 0.2).toFixed(1) +
               'V' + (L.y + L.h);
        }
        sv('path', { d: d, class: 'bars', fill: s.color, stroke: s.color, 'stroke-width': 0.6 }, cg);
        continue;
      }
      /* step line over bucket maxima; buckets thinner than half a pixel merged (max) */
      let d = '', px = null, pv = 0, started = false;
      const flush = (xa, xb, v) => {
        const y = YY(v).toFixed(1);
        d += started ? 'V' + y + 'H' + xb.toFixed(1) : 'M' + xa.toFixed(1) + ' ' + y + 'H' + xb.toFixed(1);
        started = true;
      };
      let xa0 = 0;
      for (let k = kA; k <= kB; k++) {
        const v = s.gap && s.gap(k) ? null : s.v[k];
        const xa = X(T0 + k * BW), xb = X(T0 + (k + 1) * BW);
        if (v == null) { if (px != null) { flush(xa0, px, pv); px = null; } started = false; continue; }
        if (px != null && xb - xa0 < 0.5) { if (v > pv) pv = v; px = xb; continue; }
        if (px != null) flush(xa0, px, pv);
        xa0 = xa; px = xb; pv = v;
      }
      if (px != null) flush(xa0, px, pv);
      sv('path', { d: d, class: 'line', 'data-series': s.label, stroke: s.color, 'stroke-dasharray': s.dash || null,
                   'stroke-width': s.width || 1.8 }, cg);
    }
  }

  /* ---- marker lanes --------------------------------------------------------------- */
  const ROW_H = 15, MAX_SUB = 8;
  const LANES = D.lanes.map((ln, li) => {
    const scopes = [];
    for (let i = 0; i < ln.s.length; i += 4)
      scopes.push({ t0: ln.s[i], t1: ln.s[i + 1], inst: ln.s[i + 2], n: ln.s[i + 3] });
    const points = [];
    for (let i = 0; i < ln.p.length; i += 2) points.push({ t: ln.p[i], n: ln.p[i + 1] });
    /* overlapping scopes (requests) on rows of their own, first fit by start */
    const ends = [];
    scopes.forEach((sc, k) => {
      sc.ord = k + 1;
      let r = ends.findIndex(e => e <= sc.t0);
      if (r < 0) {
        if (ends.length < MAX_SUB) { r = ends.length; ends.push(0); }
        else { r = 0; for (let q = 1; q < ends.length; q++) if (ends[q] < ends[r]) r = q; }
      }
      sc.row = r;
      ends[r] = Math.max(ends[r], sc.t1);
    });
    return { name: ln.name, scopes: scopes, points: points, rows: Math.max(1, ends.length) + (points.length ? 1 : 0),
             color: LANE_COLORS[li % LANE_COLORS.length], merged: ln.merged, nScopes: ln.scopes, nPoints: ln.points };
  });
  function lanesHeight() {
    let h = 0;
    for (const ln of LANES) h += ln.rows * ROW_H + 6;
    return Math.max(h, 20);
  }
  function drawLanes(g, L, X, PW, a, b, id) {
    let y = L.y;
    if (!LANES.length) svgText(g, ML + 6, y + 14, 'no markers in this trace', { class: 'plotnote' });
    const bg = sv('g', null, g);
    const cg = sv('g', { 'clip-path': 'url(#' + (id || 'c') + '-clip)' }, g);
    LANES.forEach((ln, li) => {
      const lab = ln.name + ' (' + fmtCount(ln.nScopes + ln.nPoints) + ')';
      const lg = sv('g', null, g), fit = fitText(lab, ML - 12, g.ownerSVGElement);
      svgText(lg, ML - 6, y + Math.min(ln.rows * ROW_H, 2 * ROW_H) / 2 + 4, fit, { class: 'lanelabel', 'text-anchor': 'end' });
      if (fit !== lab) sv('title', null, lg).textContent = lab;   /* the whole name on hover */
      sv('rect', { class: 'lanebg', x: ML, y: y, width: PW, height: ln.rows * ROW_H }, bg);
      const prow = ln.points.length ? 1 : 0;
      /* scopes: at most one rectangle per pixel and row */
      const last = [];
      ln.scopes.forEach((sc, k) => {
        if (sc.t1 < a || sc.t0 > b) return;
        let x0 = X(sc.t0), x1 = X(sc.t1);
        x0 = Math.max(ML - 2, x0); x1 = Math.min(ML + PW + 2, x1);
        const row = sc.row, w = x1 - x0;
        const prev = last[row];
        if (prev && w < 1 && x0 - prev.x1 < 1) { prev.x1 = Math.max(prev.x1, x0 + 1); prev.n++; return; }
        last[row] = { x0: x0, x1: Math.max(x1, x0 + 1), k: k, n: 1, row: row };
        last[row].el = sv('rect', { class: 'scope', x: x0, y: y + (row + prow) * ROW_H + 1.5, height: ROW_H - 3,
                                    width: Math.max(1, w), fill: ln.color, 'data-item': li + ':' + k,
                                    'data-lane': ln.name }, cg);
      });
      for (const p of last) if (p && p.n > 1) p.el.setAttribute('width', Math.max(1, p.x1 - p.x0));
      /* points: ticks on a row of their own */
      let lastX = -10;
      for (const p of ln.points) {
        if (p.t < a || p.t > b) continue;
        const x = X(p.t);
        if (x - lastX < 1) continue;
        lastX = x;
        sv('line', { class: 'point', x1: x, x2: x, y1: y + 1, y2: y + ROW_H - 1, stroke: ln.color }, cg);
      }
      y += ln.rows * ROW_H + 6;
    });
  }
  function itemOf(target) {
    const [li, k] = target.getAttribute('data-item').split(':').map(Number);
    return { ln: LANES[li], sc: LANES[li].scopes[k] };
  }
  function scopeLabel(ln, sc) {
    return sc.n > 1 ? sc.n + ' ' + ln.name + ' scopes (merged)' : ln.name + ' #' + sc.ord + ' (instance ' + sc.inst + ')';
  }
  function selectItem(target) {
    const { ln, sc } = itemOf(target);
    setSelection(sc.t0, sc.t1, scopeLabel(ln, sc));
  }
  function itemTip(ev, target) {
    const { ln, sc } = itemOf(target);
    showTip(ev, [scopeLabel(ln, sc), fmtNs(sc.t0) + ' – ' + fmtNs(sc.t1) + ' (' + fmtNs(sc.t1 - sc.t0) + ')',
                 'click: flame graph of this scope']);
  }

  /* ---- flame graphs (icicles: the root on top) ----------------------------------------- */
  const KIND_HUE = [18, 255, 135, 320, 45];
  function nodeColor(kind, name, inl) {
    const h = hashStr(name);
    const hue = KIND_HUE[kind] + (h % 30) - 15, sat = 55 + (h >> 8) % 25, lig = (inl ? 72 : 62) + (h >> 16) % 10;
    return 'hsl(' + hue + ',' + sat + '%,' + lig + '%)';
  }
  /* The tree of values by stack: all > kind > pool > frames outermost first. */
  function buildTree(value) {
    const root = { name: 'all', v: 0, n: 0, kids: new Map(), depth: 0, kind: -1, meta: null };
    for (const r of SITES) {
      if (!S.kinds.has(r.k)) continue;
      const vn = value(r);
      const v = vn[0];
      if (!(v > 0)) continue;
      let node = root;
      root.v += v; root.n += vn[1];
      const path = [['k' + r.k, KIND_LONG[r.k], null]];
      if (hasPool(r.k)) path.push(['p' + r.pool, r.pool || '?', null]);
      for (let q = 0; q < r.f.length; q++) path.push(['f' + r.f[q], null, FR[r.f[q]]]);
      if (!r.f.length) path.push(['l' + r.label, r.label, null]);
      if (r.via) path.push(['v' + r.via, 'via ' + r.via, null]);
      for (const [key, name, fr] of path) {
        let c = node.kids.get(key);
        if (!c) {
          c = { name: foldName(fr ? fr.short : name), full: fr ? frameText(fr) : name, fr: fr, v: 0, n: 0, kids: new Map(),
                depth: node.depth + 1, kind: r.k, parent: node, via: key[0] === 'v' };
          node.kids.set(key, c);
        }
        c.v += v; c.n += vn[1];
        node = c;
      }
    }
    return root;
  }
  function treeDepth(n) { let d = 0; for (const c of n.kids.values()) d = Math.max(d, treeDepth(c)); return d + 1; }
  function treeSig(root) {
    /* what the test compares: the total and the heaviest leaves */
    const leaves = [];
    (function walk(n) { if (!n.kids.size) leaves.push(n.full + '=' + n.v); else n.kids.forEach(walk); })(root);
    leaves.sort();
    return root.v + '|' + leaves.slice(0, 40).join(';');
  }

  /* Labels fitted by measuring them in the font they are drawn in (a
   * canvas with the SVG text's computed font), not by counting characters:
   * "mmm" and "iii" differ by three times. */
  const LABEL_W = 28;
  let measureCtx = null;
  const measureCache = new Map();
  function textWidth(s, svg) {
    if (!measureCtx) {
      const probe = sv('text', { x: -1000, y: -1000 }, sv('g', { class: 'fnode' }, svg));
      const cs = getComputedStyle(probe);
      measureCtx = document.createElement('canvas').getContext('2d');
      measureCtx.font = cs.fontStyle + ' ' + cs.fontWeight + ' ' + cs.fontSize + ' ' + cs.fontFamily;
      probe.parentNode.remove();
    }
    let w = measureCache.get(s);
    if (w === undefined) {
      w = measureCtx.measureText(s).width;
      if (measureCache.size > 50000) measureCache.clear();
      measureCache.set(s, w);
    }
    return w;
  }
  /* the longest prefix of s (with "…" when cut) at most avail px wide; '' if none */
  function fitText(s, avail, svg) {
    const slack = 1;                      /* sub-pixel rounding between canvas and SVG text */
    if (textWidth(s, svg) <= avail - slack) return s;
    let lo = 0, hi = s.length - 1;
    while (lo < hi) {
      const m = (lo + hi + 1) >> 1;
      if (textWidth(s.slice(0, m) + '…', svg) <= avail - slack) lo = m; else hi = m - 1;
    }
    return lo ? s.slice(0, lo) + '…' : '';
  }

  function Flame(parent, opts) {
    const box = el('div', { class: 'flamebox' });
    const head = el('div', { class: 'flamehead' });
    const crumbs = el('div', { class: 'crumbs' });
    const svg = sv('svg', { class: 'flame', id: opts.id, role: 'img' });
    box.append(head, crumbs, svg);
    parent.append(box);
    let focus = null, root = null;
    const RH = 18;
    function draw() {
      const info = opts.values();
      root = buildTree(info.value);
      clear(head);
      head.append(el('span', { class: 'fh', text: info.title }),
                  el('span', { class: 'fsub', text: [...root.kids.values()].sort((p, q) => p.kind - q.kind).map(k =>
                               KIND_NAME[k.kind] + ' ' + fmtBytes(k.v) + (k.n ? ' in ' + nOf(k.n, 'allocation') : '')).join(' · ') }));
      if (info.note) head.append(el('div', { class: 'fnote', text: info.note }));
      /* the focus may be gone from a new tree: find it again by its path */
      let f = root;
      if (focus) {
        for (const key of focus) { let hit = null; for (const [k, c] of f.kids) if (k === key) hit = c; if (!hit) break; f = hit; }
      }
      const width = Math.max(400, box.clientWidth || 900);
      const depth = root.v ? treeDepth(root) : 1;
      const height = depth * RH + 4;
      clear(svg);
      svg.setAttribute('width', width);
      svg.setAttribute('height', height);
      svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
      svg.setAttribute('data-total', root.v);
      KIND_NAME.forEach((k, i) => svg.setAttribute('data-' + k.toLowerCase(), root.kids.has('k' + i) ? root.kids.get('k' + i).v : 0));
      svg.setAttribute('data-sig', treeSig(root));
      clear(crumbs);
      if (!root.v) {
        svg.setAttribute('height', 40);
        svg.setAttribute('viewBox', '0 0 ' + width + ' 40');
        svgText(svg, 8, 24, info.empty || 'nothing allocated here', { class: 'tick' });
        return;
      }
      /* ancestors of the focus: full width; the focus's subtree scaled to the width */
      const chain = [];
      for (let n = f; n; n = n.parent) chain.unshift(n);
      chain.forEach((n, i) => {
        if (i) crumbs.append(' › ');
        crumbs.append(el('button', { type: 'button', class: 'crumb', text: n.name,
                                     onclick: () => { focus = pathOf(n); draw(); } }));
      });
      let nodes = 0, cut = 0;
      function rect(n, x, w, y, more) {
        if (w < 0.4) return;
        nodes++;
        const g = sv('g', { class: 'fnode', 'data-kind': n.kind, 'data-depth': n.depth }, svg);
        const fill = n === root ? '#d0d4da' : n.via ? '#e3e3e3' : n.depth === 1 ? ['#f2b38a', '#b7a6e6', '#92d6a4', '#e6a6d4', '#d9c27a'][n.kind] :
                     nodeColor(Math.max(0, n.kind), n.full, n.fr && n.fr.inl);
        const r = sv('rect', { x: x + 0.5, y: y, width: Math.max(0.5, w - 1), height: RH - 1, fill: fill, rx: 1.5 }, g);
        if (n.fr && n.fr.inl) r.setAttribute('class', 'inl');
        /* a stack cut below this box (see lay): a dark strip at its foot */
        if (more) sv('rect', { class: 'more', x: x + 0.5, y: y + RH - 4, width: Math.max(0.5, w - 1), height: 3 }, g);
        if (w >= LABEL_W) {
          const lab = fitText(n === root ? 'all: ' + fmtBytes(n.v) : n.depth === 1 ? n.name + ': ' + fmtBytes(n.v) : n.name,
                              w - 8, svg);
          if (lab) svgText(g, x + 4, y + RH - 5.5, lab);
        }
        g.addEventListener('mousemove', ev => showTip(ev, nodeTip(n)));
        g.addEventListener('mouseleave', hideTip);
        g.addEventListener('click', () => { focus = pathOf(n); draw(); });
      }
      /* A subtree is drawn down to its deepest row holding a box of at least
       * a twentieth of the width (and wide enough for a name): below that a
       * deep narrow stack (Python's import machinery, libc's stdio) would
       * hang a tall band of rows, empty but for a thin column, under the
       * whole graph. Boxes with stacks cut below them say so (rect's strip);
       * a click zooms into them, at the whole width. */
      const rowMin = Math.max(LABEL_W, width / 20);
      function rows(n, w) {
        if (w < rowMin) return 0;
        let d = 0;
        for (const c of n.kids.values()) d = Math.max(d, rows(c, w * c.v / n.v));
        return d + 1;
      }
      function lay(n, x, w, y, left) {
        const kids = [...n.kids.values()].sort((p, q) => q.v - p.v || (p.name < q.name ? -1 : 1));
        const more = left <= 1 && kids.length > 0;
        if (more && w >= 0.4) cut++;
        rect(n, x, w, y, more);
        if (more) return;
        let cx = x;
        for (const c of kids) {
          const cw = w * c.v / n.v;
          if (cw >= 0.4) lay(c, cx, cw, y + RH, left - 1);
          cx += cw;
        }
      }
      let hh;
      if (f === root) {
        /* the kinds one under the other, each over the whole width: a pool's
         * gigabytes of acquires would leave a heap's megabytes no room */
        let y = 0;
        for (const k of [...root.kids.values()].sort((p, q) => p.kind - q.kind)) {
          const d = Math.max(1, rows(k, width));
          lay(k, 0, width, y, d);
          y += d * RH + 8;
        }
        hh = y - 8;
      } else {
        for (let i = 0; i < chain.length - 1; i++) rect(chain[i], 0, width, i * RH, false);
        const d = Math.max(1, rows(f, width));
        lay(f, 0, width, (chain.length - 1) * RH, d);
        hh = (chain.length - 1 + d) * RH;
      }
      if (cut) head.append(el('div', { class: 'fnote', text: 'A dark foot on a box: narrower stacks go on below it; click the box to see them.' }));
      svg.setAttribute('data-nodes', nodes);
      svg.setAttribute('height', hh);
      svg.setAttribute('viewBox', '0 0 ' + width + ' ' + hh);
    }
    function pathOf(n) {
      const keys = [];
      for (; n && n.parent; n = n.parent) for (const [k, c] of n.parent.kids) if (c === n) { keys.unshift(k); break; }
      return keys.length ? keys : null;
    }
    function nodeTip(n) {
      const lines = [n.fr ? n.fr.name : n.full];
      if (n.fr) {
        if (n.fr.file) lines.push(n.fr.file + (n.fr.line ? ':' + n.fr.line : ''));
        if (n.fr.inl) lines.push('[inlined]');
        if (n.fr.mod) lines.push('in ' + n.fr.mod);
        if (n.fr.py) lines.push('Python');
      }
      lines.push(fmtBytes(n.v) + ' (' + fmtPct(n.v, root.v) + ' of this view)' +
                 (n.n ? ', ' + nOf(n.n, 'allocation') : ''));
      lines.push('click: zoom in');
      return lines;
    }
    views.push(draw);
    return { reset: () => { focus = null; }, draw: draw, svg: svg };
  }

  /* ---- the page -------------------------------------------------------------------- */
  const app = document.getElementById('app');
  clear(app);
  document.body.append(tip);
  const M = D.meta, P = D.peaks;
  const exe = M.program || M.trace;

  function section(title, id, intro) {
    const s = el('section', { id: id }, [el('h2', { text: title })]);
    if (intro) s.append(el('p', { class: 'intro', text: intro }));
    app.append(s);
    return s;
  }
  function card(label, value, sub, onclick) {
    return el(onclick ? 'button' : 'div', { class: 'card' + (onclick ? ' click' : ''), type: onclick ? 'button' : null,
                                            onclick: onclick || null },
              [el('div', { class: 'cl', text: label }), el('div', { class: 'cv', text: value }),
               sub ? el('div', { class: 'cs', text: sub }) : null]);
  }
  function table(headers, rows, cls) {
    const t = el('table', { class: cls || 'grid' });
    const tr = el('tr');
    headers.forEach(h => tr.append(el('th', { text: h })));
    t.append(el('thead', null, [tr]));
    const tb = el('tbody');
    rows.forEach(r => {
      const row = el('tr');
      r.forEach((c, i) => row.append(el('td', { class: i ? 'num' : null }, [c instanceof Node ? c : String(c)])));
      tb.append(row);
    });
    t.append(tb);
    return t;
  }

  /* header */
  const hdr = el('header', null, [
    el('h1', null, ['poolscope ', el('span', { class: 'prog', text: exe.replace(/^.*\//, '') })]),
    el('div', { class: 'argv', text: (M.argv || []).join(' ') }),
    el('div', { class: 'meta', text: 'trace ' + M.trace + ' · pid ' + M.pid + ' · ' + fmtNs(M.duration) + ' · ' +
                nOf(M.events, 'event') + ' · ' + nOf(M.threads, 'thread') +
                ' · stacks: ' + M.stacks + (M.resolution ? ' · times within ' + fmtNs(M.resolution) : '') }),
  ]);
  app.append(hdr);
  const warns = [];
  if (M.warning) warns.push(M.live_end === 'live now' ? 'This page shows a ' + M.warning + '.' : 'The trace is damaged: ' + M.warning + '.');
  if (M.live_end === 'live at stop') warns.push('Recording stopped before the program ended: what was live at the stop is not a leak.');
  if (M.killed) warns.push('The process was killed (SIGKILL or OOM): the trace ends where its rings did.');
  if (M.lost) warns.push(nOf(M.lost, 'event') + (M.lost === 1 ? ' was' : ' were') + ' lost by the tracer.');
  if (M.incomplete_sites) warns.push('Out of memory while attributing objects to sites: some are missing.');
  if (M.markers_dropped) warns.push(nOf(M.markers_dropped, 'marker') + ' past the first ones kept ' +
                                    (M.markers_dropped === 1 ? 'is' : 'are') + ' not drawn.');
  if (D.lanes_hidden) warns.push(nOf(D.lanes_hidden, 'more marker name') + (D.lanes_hidden === 1 ? ' is' : ' are') +
                                 ' not drawn (the first ' + LANES.length + ' by time are).');
  if (M.stacks === 'none') warns.push('Recorded with --stacks none: every site is "(no stack)".');
  warns.forEach(w => app.append(el('div', { class: 'warn', text: w })));

  const cards = el('div', { class: 'cards' });
  app.append(cards);
  cards.append(card('peak live heap', fmtBytes(P.heap), 'at ' + fmtNs(P.heap_t) + ', ' + nOf(P.heap_objects, 'object'),
                    () => jumpPeak('heap')));
  if (HAS.rss)
    cards.append(card('peak RSS', fmtBytes(P.rss), 'at ' + fmtNs(P.rss_t) + (M.tracer_bytes ? '; tracer\'s own ≤ ' +
                      fmtBytes(M.tracer_bytes) + ' mapped, not in any figure' : ''), () => jumpPeak('rss')));
  if (HAS.mmap)
    cards.append(card('peak mmap', fmtBytes(P.mmap_total), 'committed ' + fmtBytes(P.mmap_committed) + ', reserved ' +
                      fmtBytes(P.mmap_reserved) + '; file-backed ' + fmtBytes(P.mmap_file)));
  cards.append(card('allocated', fmtBytes(P.total_allocated), nOf(P.allocations, 'heap allocation') + ', ' +
                    fmtCount(P.temporary) + ' temporary'));
  /* suppressed leaks (known one-time buffers, --suppress) are said, never dropped */
  cards.append(card(M.live_end || 'leaked at exit', fmtBytes(P.leaked_bytes), nOf(P.leaked_objects, 'object') +
                    (P.suppressed_leaked_objects ? '; suppressed ' + fmtBytes(P.suppressed_leaked_bytes) + ' in ' +
                    nOf(P.suppressed_leaked_objects, 'object') : ''),
                    () => { tabSet('leaks'); document.getElementById('ps-sites').scrollIntoView(); }));
  if (HAS.pool)
    cards.append(card('pool hit rate', fmtPct(D.pool_totals.hits, D.pool_totals.acquires), nOf(D.pool_totals.misses, 'miss', 'misses') +
                      ' in ' + nOf(D.pool_totals.acquires, 'acquire')));
  if (HAS.kv)
    cards.append(card('KV blocks at peak', fmtCount(D.kv.peak_blocks), 'utilization ' + (100 * D.kv.util).toFixed(1) +
                      '% time-weighted', () => setCursor(D.kv.peak_t, 'kv')));

  /* timeline */
  const secT = section('Timeline', 'ps-timeline-sec',
    'Maxima per bucket of ' + fmtNs(BW) + '. Wheel: zoom · drag: select a range · shift+drag or drag the time axis: pan · ' +
    'click: place the cursor · click a marker scope: select it · double-click: zoom to the selection.');
  const bar = el('div', { class: 'toolbar' });
  secT.append(bar);
  const readout = el('span', { class: 'readout' });
  bar.append(
    el('button', { type: 'button', text: 'zoom in', onclick: () => { const c = (S.v0 + S.v1) / 2, w = (S.v1 - S.v0) / 4; setView(c - w, c + w); } }),
    el('button', { type: 'button', text: 'zoom out', onclick: () => { const c = (S.v0 + S.v1) / 2, w = S.v1 - S.v0; setView(c - w, c + w); } }),
    el('button', { type: 'button', text: 'whole run', onclick: () => setView(0, DUR) }),
    el('button', { type: 'button', text: 'zoom to selection', onclick: () => { if (S.sel) setView(S.sel.t0, S.sel.t1); } }),
    el('button', { type: 'button', text: 'clear selection', onclick: () => { S.sel = null; flameAlloc.reset(); redraw(); } }),
    readout);
  views.push(() => {
    readout.textContent = 'view ' + fmtNs(S.v0) + ' – ' + fmtNs(S.v1) +
      (S.sel ? ' · selection ' + (S.sel.label ? S.sel.label + ': ' : '') + fmtNs(S.sel.t0) + ' – ' + fmtNs(S.sel.t1) : '') +
      (S.cursor ? ' · cursor ' + fmtNs(S.cursor.t) : '');
  });
  const fB = v => fmtBytes(v), fC = v => fmtCount(v);
  /* One lane per series, each on its own scale (issue 30): on one axis the
   * heap's and the pools' megabytes lay flat under the mmap and RSS lines,
   * and their shape is the story. A lane holds only series that are parts
   * or bounds of one another (mmap committed and its anonymous and
   * file-backed parts; a pool's outstanding and reserved bytes). */
  const tracks = [];
  const LANE_H = 64;
  if (HAS.rss)
    tracks.push({ title: 'RSS', kind: 'lines', height: LANE_H, unit: 'bytes', series: [
      { label: 'RSS', v: TL.rss, color: COLORS.rss, fmt: fB, width: 2,
        note: M.tracer_bytes ? 'sampled every 10 ms; includes the tracer\'s own memory (at most ' +
                               fmtBytes(M.tracer_bytes) + ' mapped)' : 'sampled every 10 ms' }] });
  if (HAS.mmap)
    tracks.push({ title: 'mmap', kind: 'lines', height: LANE_H, unit: 'bytes', series: [
      { label: 'mmap committed', v: TL.committed, color: COLORS.committed, fmt: fB,
        note: 'mapped and accessible: anonymous + file-backed − reserved' },
      { label: 'mmap anonymous', v: TL.anon, color: COLORS.anon, fmt: fB, off: true, dash: '2 2' },
      { label: 'mmap file-backed', v: TL.file, color: COLORS.file, fmt: fB, off: !(D.peaks.mmap_file > 0), dash: '2 2' }] });
  if (HAS.reserved)
    tracks.push({ title: 'mmap reserved', kind: 'lines', height: LANE_H, unit: 'bytes', series: [
      { label: 'mmap reserved', v: TL.reserved, color: COLORS.reserved, fmt: fB, dash: '5 3',
        note: 'mapped PROT_NONE: address space only' }] });
  tracks.push({ title: 'heap live', kind: 'lines', height: LANE_H, unit: 'bytes', series: [
    { label: 'heap live', v: TL.heap, color: COLORS.heap, fmt: fB, width: 2.2,
      note: 'sum of the requested bytes of live heap objects' }] });
  if (HAS.pool || D.peaks.pool_out > 0)
    tracks.push({ title: 'pools', kind: 'lines', height: LANE_H, unit: 'bytes', series: [
      { label: 'pool outstanding', v: TL.pool_out, color: COLORS.pool_out, fmt: fB, dash: '6 3',
        note: 'granted bytes of the buffers handed out' },
      { label: 'pool reserved', v: TL.pool_res, color: COLORS.pool_res, fmt: fB, dash: '2 3', width: 2.2,
        note: 'outstanding + cached: what the pools hold' }] });
  if (HAS.kv) {
    const util = new Float64Array(NB);
    for (let i = 0; i < NB; i++) util[i] = TL.kv_cap[i] ? 100 * TL.kv_tokens[i] / TL.kv_cap[i] : 0;
    tracks.push({ title: 'KV cache', kind: 'lines', height: LANE_H + 10, unit: 'count', rightUnit: 'pct', series: [
      { label: 'KV blocks in use', v: TL.kv_blocks, color: COLORS.kv_blocks, fmt: fC },
      { label: 'KV utilization (tokens / capacity)', v: util, color: COLORS.kv_util, fmt: v => v.toFixed(1) + '%', right: true,
        gap: k => !TL.kv_cap[k], dash: '4 2' }] });
  }
  tracks.push({ title: 'markers', kind: 'lanes' });
  TimeChart(secT, tracks, { id: 'ps-timeline',
                            note: 'each lane on a scale of its own' + (M.tracer_bytes && HAS.rss ?
                                  '; RSS includes the tracer\'s own share (≤ ' + fmtBytes(M.tracer_bytes) + ')' : '') });

  /* phases */
  if (D.phases.length) {
    const det = el('details', { class: 'phases' }, [el('summary', { text: 'Phases (' + nOf(D.phases.length, 'marker name') + ')' })]);
    det.append(table(['marker', 'scopes', 'heap calls', 'heap bytes', 'calls / scope', 'time open'],
      D.phases.map(p => [p.name, fmtCount(p.count), fmtCount(p.heap_calls), fmtBytes(p.heap_bytes),
                         p.count ? (p.heap_calls / p.count).toFixed(1) : '-', fmtNs(p.time)])));
    secT.append(det);
  }

  /* flame graphs */
  const secF = section('What was allocated, and what is live', 'ps-flames',
    'Bytes by call stack, the root on top, callers above callees; a stack\'s wrappers (malloc, operator new, the pool library…) ' +
    'are left out as in the report\'s site names. Click a box to zoom in, a name in the trail to zoom out.');
  const kindBar = el('div', { class: 'toolbar' });
  secF.append(kindBar);
  kindBar.append(el('span', { class: 'tlabel', text: 'show:' }));
  kindsPresent.forEach(k => {
    const cb = el('input', { type: 'checkbox', checked: true, id: 'ps-kind-' + KIND_NAME[k],
                             onchange: () => { if (cb.checked) S.kinds.add(k); else S.kinds.delete(k); flameAlloc.reset(); flameLive.reset(); redraw(); } });
    kindBar.append(el('label', { class: 'kind' }, [cb, ' ' + KIND_LONG[k]]));
  });
  if (!kindsPresent.length) kindBar.append(el('span', { text: 'no allocations in this trace' }));
  const flameAlloc = Flame(secF, { id: 'ps-flame-alloc', values: () => {
    if (!S.sel) return { title: 'Allocated over the whole run (drag on the timeline or click a marker scope to select a range)',
                         value: r => [r.bytes, r.calls] };
    const ja = sbOf(S.sel.t0), jb = sbOf(S.sel.t1);
    const wa = T0 + ja * SBW, wb = Math.min(DUR, T0 + (jb + 1) * SBW);
    return { title: 'Allocated in ' + (S.sel.label ? S.sel.label + ', ' : '') + fmtNs(S.sel.t0) + ' – ' + fmtNs(S.sel.t1),
             note: 'counted over whole time buckets of ' + fmtNs(SBW) + ': ' + fmtNs(wa) + ' – ' + fmtNs(wb),
             value: r => rowAlloc(r, ja, jb), empty: 'nothing allocated in the selection' };
  } });
  const liveBar = el('div', { class: 'toolbar' });
  secF.append(liveBar);
  function jumpPeak(which) {
    if (which === 'heap') setCursor(P.heap_t, 'heap'); else setCursor(P.rss_t, 'rss');
    document.getElementById('ps-flame-live').scrollIntoView({ block: 'nearest' });
  }
  liveBar.append(el('button', { type: 'button', id: 'ps-jump-heap', text: 'jump to peak heap', onclick: () => jumpPeak('heap') }));
  if (HAS.rss) liveBar.append(el('button', { type: 'button', id: 'ps-jump-rss', text: 'jump to peak RSS', onclick: () => jumpPeak('rss') }));
  liveBar.append(el('span', { class: 'tlabel', text: 'or click the timeline to place the cursor' }));
  const PKI = { heap: 0, rss: 1, pool: 2, kv: 3 };
  const flameLive = Flame(secF, { id: 'ps-flame-live', values: () => {
    if (!S.cursor) return { title: 'Live at the cursor: place it on the timeline, or jump to a peak', value: () => [0, 0],
                            empty: 'no cursor yet' };
    const c = S.cursor;
    if (c.mode !== 'bucket') {
      const i = PKI[c.mode];
      const what = { heap: 'the heap peak', rss: 'the RSS peak', pool: 'the pool outstanding peak',
                     kv: 'the KV blocks peak' }[c.mode];
      return { title: 'Live at ' + what + ', ' + fmtNs(c.t), value: r => [r.pk[i], 0],
               note: (c.why ? c.why + ' ' : '') + 'Exact: what each stack held at that moment.', empty: 'nothing live then' };
    }
    const j = sbOf(c.t);
    return { title: 'Live at ' + fmtNs(c.t), value: r => [rowLive(r, j), 0], empty: 'nothing live then',
             note: 'as of the end of its time bucket, ' + fmtNs(T0 + j * SBW) + ' – ' + fmtNs(T0 + (j + 1) * SBW) };
  } });

  /* sites */
  const secS = section('Sites', 'ps-sites',
    'One row per site name (the first meaningful frame and its caller, as `poolscope report` names them); click a row for its stack.');
  const groups = new Map();
  for (const r of SITES) {
    const key = r.k + '\u0000' + (r.pool || '') + '\u0000' + r.label + '\u0000' + (r.via || '');
    let g = groups.get(key);
    if (!g) {
      g = { k: r.k, pool: r.pool, kindLabel: r.kindLabel, label: r.label, via: r.via, rows: [], calls: 0, bytes: 0,
            live: 0, live_n: 0, temp: 0, peak: 0, search: '' };
      groups.set(key, g);
    }
    g.rows.push(r);
    g.calls += r.calls; g.bytes += r.bytes; g.temp += r.temp;
    /* suppressed leaks (--suppress, the default list) are said apart, not in the leaks */
    if (r.sup) { g.sup = (g.sup || 0) + r.live; g.sup_n = (g.sup_n || 0) + r.live_n; }
    else { g.live += r.live; g.live_n += r.live_n; }
    g.peak += r.pk[[0, 2, 3, 1, 1][r.k]];   /* heap, pool, KV peaks; mappings at the RSS peak */
    g.search += r.search + ' ';
  }
  const G = [...groups.values()];
  G.forEach(g => g.rows.sort((a, b) => b.bytes - a.bytes));
  const sbar = el('div', { class: 'toolbar' });
  secS.append(sbar);
  const tabs = {};
  let tab = 'all', sortKey = 'bytes', sortDir = -1, query = '', limit = 200;
  function tabSet(t) {
    tab = t; limit = 200;
    sortKey = t === 'leaks' ? 'live' : t === 'temp' ? 'temp' : 'bytes';
    sortDir = -1;
    for (const k in tabs) tabs[k].classList.toggle('on', k === t);
    drawSites();
  }
  const liveEnd = D.meta.live_end || 'leaked at exit';   /* at a stop or a trace being written: not leaks */
  [['all', 'all sites'], ['leaks', liveEnd === 'leaked at exit' ? 'leaks at exit' : liveEnd],
   ['temp', 'temporary allocations']].forEach(([k, lab]) => {
    tabs[k] = el('button', { type: 'button', class: 'tab' + (k === 'all' ? ' on' : ''), text: lab, id: 'ps-tab-' + k,
                             onclick: () => tabSet(k) });
    sbar.append(tabs[k]);
  });
  const search = el('input', { type: 'search', placeholder: 'search function, file, site…', id: 'ps-search',
                               oninput: () => { query = search.value.trim().toLowerCase(); limit = 200; drawSites(); } });
  sbar.append(search);
  const scount = el('span', { class: 'tlabel' });
  sbar.append(scount);
  const sTable = el('table', { class: 'grid sites', id: 'ps-site-table' });
  secS.append(sTable);
  const more = el('button', { type: 'button', class: 'more', onclick: () => { limit *= 4; drawSites(); } });
  secS.append(more);
  const COLS = [
    ['label', 'site', 'the first meaningful frame and its caller; "via" the wrapper it was allocated through'],
    ['kind', 'kind', 'heap, the pool / KV pool, or anonymous / file-backed mappings'],
    ['calls', 'calls', 'allocations (pool: acquires; mappings: mmap calls)'],
    ['bytes', 'bytes', 'requested bytes allocated (pool: granted; mappings: committed)'],
    ['peak', 'at peak', 'live at the peak: heap rows at the heap peak, pool rows at the pools\' outstanding peak, KV rows at the KV peak, mappings at the RSS peak'],
    ['live', liveEnd === 'leaked at exit' ? 'live at exit' : liveEnd, 'never freed: leaked (heap), still out (pool)'],
    ['temp', 'temporary', 'freed before any other allocation of its kind'],
    ['sel', 'in selection', 'bytes allocated in the selected range (whole run when none)'],
  ];
  function selValue(g) {
    if (!S.sel) return g.bytes;
    const ja = sbOf(S.sel.t0), jb = sbOf(S.sel.t1);
    let v = 0;
    for (const r of g.rows) v += rowAlloc(r, ja, jb)[0];
    return v;
  }
  let lastSel = '';
  function drawSites() {
    clear(sTable);
    const tr = el('tr');
    COLS.forEach(([k, lab, title]) => {
      const th = el('th', { title: title, class: (k === 'label' || k === 'kind' ? '' : 'num') + (k === sortKey ? ' sorted' : ''),
                            onclick: () => { if (sortKey === k) sortDir = -sortDir; else { sortKey = k; sortDir = k === 'label' || k === 'kind' ? 1 : -1; } drawSites(); } },
                    [lab + (k === sortKey ? (sortDir < 0 ? ' ▼' : ' ▲') : '')]);
      tr.append(th);
    });
    sTable.append(el('thead', null, [tr]));
    let rows = G.filter(g => (tab !== 'leaks' || (g.live > 0 && g.k === 0)) && (tab !== 'temp' || g.temp > 0) &&
                             (!query || g.search.includes(query)));
    rows.forEach(g => { g.sel = selValue(g); });
    const key = sortKey === 'kind' ? 'kindLabel' : sortKey;
    rows.sort((a, b) => {
      const x = a[key], y = b[key];
      const c = typeof x === 'string' ? x.localeCompare(y) : x - y;
      return c * sortDir || b.bytes - a.bytes;
    });
    scount.textContent = fmtCount(rows.length) + ' of ' + nOf(G.length, 'site');
    const tb = el('tbody');
    rows.slice(0, limit).forEach(g => {
      const row = el('tr', { class: 'site' });
      const fl = foldName(g.label), fv = g.via && foldName(g.via);
      const name = el('td', { class: 'sname', title: fl !== g.label || fv !== g.via ?
                              g.label + (g.via ? ' via ' + g.via : '') : null }, [fl]);
      if (g.via) name.append(el('span', { class: 'via', text: ' via ' + fv }));
      if (g.rows.length > 1) name.append(el('span', { class: 'via', text: ' · ' + nOf(g.rows.length, 'stack') }));
      row.append(name, el('td', { text: g.kindLabel }),
                 el('td', { class: 'num', text: fmtCount(g.calls) }), el('td', { class: 'num', text: fmtBytes(g.bytes) }),
                 el('td', { class: 'num', text: g.peak ? fmtBytes(g.peak) : '' }),
                 el('td', { class: 'num', text: g.live ? fmtBytes(g.live) + ' (' + fmtCount(g.live_n) + ')' :
                                                g.sup ? 'suppressed: ' + fmtBytes(g.sup) + ' (' + fmtCount(g.sup_n) + ')' : '' }),
                 el('td', { class: 'num', text: g.temp ? fmtCount(g.temp) : '' }),
                 el('td', { class: 'num', text: g.sel ? fmtBytes(g.sel) : '' }));
      let open = null;
      row.addEventListener('click', () => {
        if (open) { open.remove(); open = null; row.classList.remove('open'); return; }
        row.classList.add('open');
        open = el('tr', { class: 'stack' }, [el('td', { colspan: COLS.length }, [stackList(g)])]);
        row.after(open);
      });
      tb.append(row);
    });
    sTable.append(tb);
    more.style.display = rows.length > limit ? '' : 'none';
    more.textContent = 'show more (' + fmtCount(rows.length - limit) + ' not shown)';
  }
  function stackList(g) {
    const box = el('div', { class: 'stacklist' });
    const r = g.rows[0];
    if (g.rows.length > 1) box.append(el('div', { class: 'fnote', text: g.rows.length +
      ' stacks read as this site; the one with the most bytes (' + fmtBytes(r.bytes) + '):' }));
    if (!r.frames.length) box.append(el('div', { text: r.stack ? '(no symbolized frame)' : '(no stack recorded)' }));
    const ol = el('ol', { class: 'frames' });
    for (let i = r.frames.length - 1; i >= 0; i--) {
      const f = r.frames[i];
      ol.append(el('li', { class: f.inl ? 'inl' : null }, [
        el('span', { class: 'fn', text: f.name }),
        f.file ? el('span', { class: 'loc', text: '  ' + f.file + (f.line ? ':' + f.line : '') }) : null,
        f.inl ? el('span', { class: 'via', text: '  [inlined]' }) : null,
        f.mod ? el('span', { class: 'mod', text: '  ' + f.mod }) : null,
        f.py ? el('span', { class: 'mod', text: '  Python' }) : null]));
    }
    if (r.via) ol.append(el('li', { class: 'wrap' }, [el('span', { class: 'via', text: 'through ' + r.via + ' (a wrapper, left out of the name)' })]));
    box.append(ol);
    return box;
  }
  drawSites();
  views.push(() => {   /* the "in selection" column follows the selection */
    const k = S.sel ? S.sel.t0 + ':' + S.sel.t1 : '';
    if (k !== lastSel) { lastSel = k; drawSites(); }
  });

  /* pools: what they held (peak reserved against peak live, the figures of
   * the report's Pools section and of replay's pool row) and how often a
   * cached buffer served an acquire, first; the cumulative bytes requested
   * and granted are throughput (each re-use of a buffer counts its whole
   * size again), not memory held, and come second, in small print. */
  if (BUFPOOLS.length) {
    const secP = section('Pools', 'ps-pools', 'Buffer pools as the trace\'s pool events describe them.');
    const PT = D.pool_totals, resv = P.pool_reserved, live = PT.peak_live;
    const figs = el('div', { class: 'cards poolfigs' });
    const fig = (id, label, value, sub, data) => {
      const c = card(label, value, sub);
      c.id = id;
      if (data != null) c.setAttribute('data-value', data);
      return c;
    };
    figs.append(
      fig('ps-pool-reserved', 'peak reserved', fmtBytes(resv), 'outstanding + cached at most, at ' + fmtNs(P.pool_reserved_t) +
          (BUFPOOLS.length > 1 ? ', all ' + BUFPOOLS.length + ' pools' : ''), resv),
      fig('ps-pool-ratio', 'peak reserved / peak live', fmtRatio(PT.reserved_over_live), 'peak live ' + fmtBytes(live) +
          ': the most requested bytes out at once', PT.reserved_over_live),
      fig('ps-pool-hitrate', 'hit rate', fmtPct(PT.hits, PT.acquires), nOf(PT.misses, 'miss', 'misses') + ' in ' +
          nOf(PT.acquires, 'acquire') + '; ' + nOf(PT.backing_allocs, 'backing allocation'), PT.acquires ? PT.hits / PT.acquires : null));
    secP.append(figs);
    /* peak live and peak reserved as bars on one scale: the gap is the pool's cost */
    const rl = el('div', { class: 'rgbars', id: 'ps-pool-bars' });
    const top = Math.max(1, resv, live);
    [['peak live', live, COLORS.pool_out], ['peak reserved', resv, COLORS.pool_res]].forEach(([lab, v, c]) => {
      const b = el('div', { class: 'rgbar' });
      b.style.width = Math.max(0.5, 75 * v / top) + '%';
      b.style.background = c;
      rl.append(el('div', { class: 'rgline' }, [b, el('span', { text: lab + ' ' + fmtBytes(v) })]));
    });
    secP.append(rl);
    let req = 0, gr = 0, over = 0;
    for (const p of BUFPOOLS) { req += p.req_bytes; gr += p.granted_bytes; over += p.oversized; }
    secP.append(el('p', { class: 'fnote', id: 'ps-pool-cumulative', text: 'Over the whole run (throughput, not memory held): ' +
      nOf(PT.acquires, 'acquire') + ' requested ' + fmtBytes(req) + ' and were handed buffers of ' + fmtBytes(gr) + ' in all (' +
      fmtRatio(req ? gr / req : NaN) + '); ' + nOf(over, 'acquire') + ' (' + fmtPct(over, PT.acquires) + ') got a cached ' +
      'buffer more than twice the request, as a first-fit pool re-uses a larger buffer rather than allocate.' }));
    secP.append(table(['pool', 'peak outstanding', 'peak cached', 'hit rate', 'acquires', 'misses', 'requested', 'granted',
                       'granted / requested', '> 2× the request', 'cap'],
      BUFPOOLS.map(p => [p.name, fmtBytes(p.peak_out), fmtBytes(p.peak_cached), fmtPct(p.hits, p.acquires), fmtCount(p.acquires),
                         fmtCount(p.acquires - p.hits), fmtBytes(p.req_bytes), fmtBytes(p.granted_bytes),
                         fmtRatio(p.req_bytes ? p.granted_bytes / p.req_bytes : NaN),
                         fmtCount(p.oversized) + ' (' + fmtPct(p.oversized, p.acquires) + ')', p.cap ? fmtBytes(p.cap) : '-'])));
    const acq = sumPools('acq'), miss = sumPools('miss'), reqB = sumPools('req'), grB = sumPools('granted');
    const rate = new Float64Array(NB);
    for (let i = 0; i < NB; i++) rate[i] = acq[i] ? 100 * (acq[i] - miss[i]) / acq[i] : 0;
    /* lanes of their own, as on the timeline: misses are a few dozen among
     * thousands of acquires, the requested bytes a fiftieth of the granted */
    TimeChart(secP, [
      { title: 'acquires per bucket of ' + fmtNs(BW), kind: 'bars', height: 60, unit: 'count', series: [
        { label: 'acquires', v: acq, color: COLORS.acq, fmt: fC }] },
      { title: 'misses per bucket', kind: 'bars', height: 40, unit: 'count', series: [
        { label: 'misses', v: miss, color: COLORS.miss, fmt: fC }] },
      { title: 'hit rate per bucket', kind: 'lines', height: 60, unit: 'count', rightUnit: 'pct', series: [
        { label: 'hit rate', v: rate, color: '#2ca02c', fmt: v => v.toFixed(1) + '%', right: true, gap: k => !acq[k] }] },
      { title: 'requested bytes per bucket', kind: 'lines', height: 60, unit: 'bytes', series: [
        { label: 'requested', v: reqB, color: COLORS.req, fmt: fB }] },
      { title: 'granted bytes per bucket', kind: 'lines', height: 60, unit: 'bytes', series: [
        { label: 'granted', v: grB, color: COLORS.granted, fmt: fB, dash: '4 2' }] },
    ], { id: 'ps-poolchart', note: 'same time axis as the timeline; each lane on a scale of its own' });
  }

  /* KV */
  if (HAS.kv || KVPOOLS.length) {
    const secK = section('KV cache', 'ps-kv', 'Paged KV blocks as the block pool\'s events describe them.');
    const k = D.kv;
    const kc = el('div', { class: 'cards' });
    kc.append(card('peak blocks in use', fmtCount(k.peak_blocks), 'at ' + fmtNs(k.peak_t), () => setCursor(k.peak_t, 'kv')),
              card('utilization', (100 * k.util).toFixed(1) + '%', 'tokens stored / block capacity, time-weighted'),
              card('at the peak', (100 * k.util_at_peak).toFixed(1) + '%', 'utilization when most blocks were held'),
              card('waste', (100 * k.waste).toFixed(1) + '%', '1 − utilization'));
    if (k.util_per_step != null) kc.append(card('per decode step', (100 * k.util_per_step).toFixed(1) + '%', nOf(k.decode_steps, 'step')));
    secK.append(kc);
    secK.append(table(['KV pool', 'block size (tokens)', 'blocks', 'bytes per block'],
      KVPOOLS.map(p => [p.name, fmtCount(p.block_size), p.n_blocks ? fmtCount(p.n_blocks) : '-', fmtBytes(p.block_bytes)])));
    if (k.orphans) secK.append(el('div', { class: 'warn', text: fmtCount(k.orphans) + ' KV events of pools never created were ignored.' }));
  }

  /* replay */
  if (D.replay && Array.isArray(D.replay.policies)) {
    const R = D.replay;
    const secR = section('Replay: the same allocations under other policies', 'ps-replay',
      'From poolscope replay --json' + (R.trace && R.trace.stream ? ' (' + R.trace.stream + ' stream)' : '') +
      '. Peak reserved is what the policy holds from its backing store; peak live is the lower bound.');
    const pol = R.policies.filter(p => p && typeof p === 'object');
    const topR = Math.max(1, ...pol.map(p => +p.peak_reserved_bytes || 0));
    const t = table(['policy', 'peak live', 'peak reserved', 'reserved / live', '', 'internal frag', 'hit rate', 'backing allocs',
                     'total allocated'],
      pol.map(p => {
        const barEl = el('div', { class: 'rbar' });
        barEl.style.width = (100 * (+p.peak_reserved_bytes || 0) / topR) + '%';
        return [String(p.name), fmtBytes(p.peak_live_bytes), fmtBytes(p.peak_reserved_bytes), fmtRatio(p.reserved_over_live),
                el('div', { class: 'rbarbox' }, [barEl]),
                p.internal_frag != null ? (100 * p.internal_frag).toFixed(1) + '%' : '-',
                p.hits || p.misses ? (100 * p.hit_rate).toFixed(1) + '%' : '-', fmtCount(p.backing_allocs),
                fmtBytes(p.total_allocated_bytes)];
      }), 'grid replay');
    t.id = 'ps-replay-table';
    secR.append(t);
    if (Array.isArray(R.skipped) && R.skipped.length)
      secR.append(el('ul', { class: 'skipped' }, R.skipped.map(s => el('li', { text: 'skipped ' + s.policy + ': ' + s.reason }))));
  }

  app.append(el('footer', { text: 'Made by poolscope html from ' + M.trace + '. Self-contained: this file loads nothing. ' +
    nOf(SITES.length, 'site row') + ', ' + nOf(NB, 'timeline bucket') + ' of ' + fmtNs(BW) + ', site buckets of ' + fmtNs(SBW) + '.' }));

  /* The page opens on a peak, its live flame graph drawn. Which peak: the
   * one at which the stacks tell the most, i.e. at which the rows (heap,
   * pool and KV alike) held the most bytes in all (r.pk: exact, what each
   * stack held at that moment). The candidates are every peak the rows
   * were saved at: heap live, RSS, pool outstanding, KV blocks. Heap or RSS
   * alone would open the demo at the end of its run, where its flat heap
   * (the weights) first reaches its top and RSS is highest, after every
   * request has returned its blocks and buffers; there the graph shows the
   * weights and nothing of serving. RSS by itself is no reason: it is the
   * largest figure but holds what no stack owns (the binary, the tracer,
   * freed memory glibc keeps). A tie goes to the earlier in this order,
   * the heap peak (the report's own figure) first. */
  (function openOnPeak() {
    const has = [true, HAS.rss, HAS.pool, HAS.kv], sum = [0, 0, 0, 0];
    for (const r of SITES) for (let i = 0; i < 4; i++) sum[i] += r.pk[i];
    let best = 0;
    for (let i = 1; i < 4; i++) if (has[i] && sum[i] > sum[best]) best = i;
    const mode = ['heap', 'rss', 'pool', 'kv'][best], name = ['heap', 'RSS', 'pool outstanding', 'KV blocks'];
    const others = [0, 1, 2, 3].filter(i => i !== best && has[i]).map(i => fmtBytes(sum[i]) + ' at the ' + name[i] + ' peak');
    setCursor(P.pk_t[best], mode, 'Opened here: the stacks hold the most at this peak, ' + fmtBytes(sum[best]) +
              (others.length ? ' (' + others.join(', ') + ').' : '.'));
  })();
  if (raf) { cancelAnimationFrame(raf); raf = 0; }
  views.forEach(v => v());
  const tti = performance.now();
  window.__poolscope = { ready: true, parse_ms: tti - t_start, tti_ms: tti, setCursor: setCursor, setSelection: setSelection,
                         setView: setView, state: S };
  document.body.setAttribute('data-ready', '1');
})();
