// html_check.js — opens a page `poolscope html` wrote in headless Chromium
// (Debian's, driven by playwright-core from tests/browser/package-lock.json)
// and checks what a person would: it loads with no console error and no
// request but the file itself, the timeline and the flame graphs draw,
// clicking a marker scope changes the flame graph, "jump to peak heap" puts
// the cursor at the report's peak time and shows exactly the report's peak
// heap bytes live, the site table sorts, searches and lists the leaks, the
// replay table has every policy. Prints "ok NAME" / "not ok NAME" lines
// (tests/integration/lib.sh's convention) and a "measure ..." line; saves
// screenshots into SHOTS.
//
//   node html_check.js PAGE.html REPORT.json REPLAY.json SHOTS_DIR
// Environment: BROWSER_DEPS (the folder holding node_modules), CHROMIUM.
'use strict';
const path = require('path');
const fs = require('fs');
const deps = process.env.BROWSER_DEPS || path.join(__dirname, 'node_modules');
const { chromium } = require(require.resolve('playwright-core', { paths: [deps] }));

const [page_path, report_path, replay_path, shots] = process.argv.slice(2);
/* REPORT.json "-": load the page and measure it only (any trace) */
const load_only = report_path === '-';
const report = load_only ? null : JSON.parse(fs.readFileSync(report_path, 'utf8'));
const replay = load_only || replay_path === '-' ? null : JSON.parse(fs.readFileSync(replay_path, 'utf8'));
fs.mkdirSync(shots, { recursive: true });
const url = 'file://' + path.resolve(page_path);

let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log('ok ' + name);
  else { console.log('not ok ' + name); if (detail !== undefined) console.log('  ' + name + ': ' + detail); failed++; }
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  const errors = [], requests = [];
  page.on('console', m => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
  page.on('pageerror', e => errors.push('pageerror: ' + e.message));
  context.on('request', r => requests.push(r.url()));

  const t0 = Date.now();
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => window.__poolscope && window.__poolscope.ready, null, { timeout: 60000 });
  const wall_ms = Date.now() - t0;
  const tti = await page.evaluate(() => window.__poolscope.tti_ms);
  const bytes = fs.statSync(page_path).size;
  console.log('measure html_bytes=' + bytes + ' tti_ms=' + tti.toFixed(0) + ' wall_ms=' + wall_ms);
  await page.screenshot({ path: path.join(shots, '1-overview.png'), fullPage: true });
  if (load_only) {
    const paths = await page.$$eval('#ps-timeline path.line', a => a.filter(p => (p.getAttribute('d') || '').length > 20).length);
    check('timeline_draws_series', paths >= 1, paths + ' paths');
    check('flame_graph_draws', Number(await page.$eval('#ps-flame-alloc', e => e.getAttribute('data-nodes'))) > 1);
    check('no_console_errors', errors.length === 0, errors.join(' | '));
    check('no_network_requests', requests.length === 1 && requests[0] === url, requests.join(' '));
    await browser.close();
    process.exit(failed ? 1 : 0);
  }

  /* the page redraws on the next animation frame: let two go by after each action */
  const settle = () => page.evaluate(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))));
  const count = sel => page.$$eval(sel, a => a.length);
  const attr = (sel, a) => page.$eval(sel, (e, n) => e.getAttribute(n), a);

  /* the timeline draws: series paths with data, the marker lanes' scopes */
  const paths = await page.$$eval('#ps-timeline path.line', a => a.filter(p => (p.getAttribute('d') || '').length > 20).length);
  check('timeline_draws_series', paths >= 3, paths + ' paths');
  const scopes = await count('#ps-timeline rect.scope');
  check('timeline_draws_marker_scopes', scopes > 0, scopes + ' scopes');
  const lanes = await page.$$eval('#ps-timeline text.lanelabel', a => a.map(t => t.textContent));
  check('timeline_has_phase_lanes', ['request', 'prefill', 'decode', 'forward'].every(n => lanes.some(l => l.startsWith(n + ' '))),
        JSON.stringify(lanes));
  /* the flame graph of the whole run draws */
  const nodes = Number(await attr('#ps-flame-alloc', 'data-nodes'));
  check('flame_graph_draws', nodes > 3 && (await count('#ps-flame-alloc rect')) > 3, nodes + ' nodes');
  const sig_all = await attr('#ps-flame-alloc', 'data-sig');

  /* clicking a phase instance selects it and changes the flame graph */
  await page.click('#ps-timeline rect.scope[data-lane="prefill"]');
  await settle();
  await page.waitForSelector('#ps-selection', { state: 'attached' });
  const sig_prefill = await attr('#ps-flame-alloc', 'data-sig');
  check('phase_click_selects', (await count('#ps-selection')) === 1);
  check('phase_click_changes_flame_graph', sig_prefill !== sig_all, sig_prefill.slice(0, 80));
  const title = await page.$eval('#ps-flames .flamehead .fh', e => e.textContent);
  check('flame_graph_names_the_scope', /prefill #1/.test(title), title);
  await (await page.$('#ps-timeline-sec')).screenshot({ path: path.join(shots, '2-timeline-prefill.png') });
  await (await page.$('#ps-flames')).screenshot({ path: path.join(shots, '3-flame-prefill.png') });
  const decode = await page.$$('#ps-timeline rect.scope[data-lane="decode"]');
  check('decode_scopes_drawn', decode.length > 0, decode.length);
  if (decode.length) {
    await decode[decode.length - 1].click();
    await settle();
    const sig_decode = await attr('#ps-flame-alloc', 'data-sig');
    check('another_phase_changes_flame_graph', sig_decode !== sig_prefill, sig_decode.slice(0, 80));
  }

  /* jump to peak heap: the cursor at the report's peak time, the live view exactly the peak */
  await page.click('#ps-jump-heap');
  await settle();
  await page.waitForSelector('#ps-cursor', { state: 'attached' });
  const cursor_t = Number(await attr('#ps-cursor', 'data-t'));
  check('jump_to_peak_heap_moves_cursor_to_report_peak', cursor_t === report.peak_live_t_ns,
        'cursor ' + cursor_t + ', report ' + report.peak_live_t_ns);
  for (const k of ['pool', 'KV', 'mmap', 'files']) {
    const cb = await page.$('#ps-kind-' + k);
    if (cb) await cb.uncheck();
    await settle();
  }
  const live_heap = Number(await attr('#ps-flame-live', 'data-total'));
  check('live_at_heap_peak_is_report_peak', live_heap === report.peak_live_bytes,
        'live ' + live_heap + ', report ' + report.peak_live_bytes);
  for (const k of ['pool', 'KV', 'mmap', 'files']) {
    const cb = await page.$('#ps-kind-' + k);
    if (cb) await cb.check();
    await settle();
  }
  await (await page.$('#ps-flames')).screenshot({ path: path.join(shots, '4-live-at-peak-heap.png') });
  const rss_btn = await page.$('#ps-jump-rss');
  if (rss_btn) {
    await rss_btn.click();
    await settle();
    const rss_t = Number(await attr('#ps-cursor', 'data-t'));
    const want = await page.evaluate(() => JSON.parse(document.getElementById('ps-data').textContent).peaks.rss_t);
    check('jump_to_peak_rss_moves_cursor', rss_t === want && rss_t !== cursor_t, rss_t + ' vs ' + want);
  }

  /* zoom (wheel) and pan (shift+drag) change the view; a drag selects a range */
  const readout = () => page.$eval('#ps-timeline-sec .readout', e => e.textContent.split(' · ')[0]);
  await page.$eval('#ps-timeline', e => e.scrollIntoView({ block: 'start' }));
  let box = await (await page.$('#ps-timeline')).boundingBox();
  const before = await readout();
  await page.mouse.move(box.x + box.width * 0.7, box.y + 120);
  await page.mouse.wheel(0, -400);
  await settle();
  const zoomed = await readout();
  check('wheel_zooms', zoomed !== before, before + ' -> ' + zoomed);
  await page.keyboard.down('Shift');
  await page.mouse.move(box.x + box.width * 0.6, box.y + 120);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.4, box.y + 120, { steps: 5 });
  await page.mouse.up();
  await settle();
  await page.keyboard.up('Shift');
  const panned = await readout();
  check('shift_drag_pans', panned !== zoomed, zoomed + ' -> ' + panned);
  await page.click('#ps-timeline-sec button:text("whole run")');
  await settle();
  const sel_before = await attr('#ps-flame-alloc', 'data-sig');
  await page.$eval('#ps-timeline', e => e.scrollIntoView({ block: 'start' }));
  box = await (await page.$('#ps-timeline')).boundingBox();
  await page.mouse.move(box.x + box.width * 0.75, box.y + 120);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.95, box.y + 120, { steps: 5 });
  await page.mouse.up();
  await settle();
  const sel_after = await attr('#ps-flame-alloc', 'data-sig');
  check('drag_selects_a_range', sel_after !== sel_before);

  /* the site table: sorted, searchable, leaks at exit */
  const rows = await count('#ps-site-table tbody tr.site');
  check('site_table_has_rows', rows > 3, rows);
  await page.fill('#ps-search', 're_engine_create');
  await settle();
  const found = await page.$$eval('#ps-site-table tbody tr.site td.sname', a => a.map(t => t.textContent));
  /* the search covers every frame of a site's stack, not only its name */
  check('site_search_filters', found.length > 0 && found.length < rows && found.some(t => /re_engine_create/.test(t)),
        found.length + ' of ' + rows);
  await page.click('#ps-site-table tbody tr.site');
  await settle();
  check('site_row_expands_to_its_stack', (await count('#ps-site-table ol.frames li')) > 0);
  await page.fill('#ps-search', '');
  await settle();
  await page.click('#ps-site-table th:text("calls")');
  await settle();
  const calls = await page.$$eval('#ps-site-table tbody tr.site', a => a.map(r => Number(r.children[2].textContent.replace(/,/g, ''))));
  check('site_table_sorts', calls.every((v, i) => !i || calls[i - 1] >= v), calls.slice(0, 8).join(' '));
  await page.click('#ps-tab-leaks');
  await settle();
  const leaks = await count('#ps-site-table tbody tr.site');
  /* REPORT.json from report --json --top with room for every leak */
  check('leaks_tab_lists_report_leaks', leaks === report.sites.leaks.length, leaks + ' vs ' + report.sites.leaks.length);
  await (await page.$('#ps-sites')).screenshot({ path: path.join(shots, '5-sites-leaks.png') });

  /* pools, KV, replay */
  check('pool_panel_drawn', (await count('#ps-pools table')) === 1 && (await count('#ps-poolchart path')) > 0);
  check('kv_panel_drawn', (await count('#ps-kv .card')) >= 3);
  if (replay) {
    const policies = await count('#ps-replay-table tbody tr');
    check('replay_table_has_every_policy', policies === replay.policies.length, policies + ' vs ' + replay.policies.length);
  }
  await (await page.$('#ps-pools')).screenshot({ path: path.join(shots, '6-pools.png') });
  if (replay) await (await page.$('#ps-replay')).screenshot({ path: path.join(shots, '7-replay.png') });

  check('no_console_errors', errors.length === 0, errors.join(' | '));
  const others = requests.filter(u => u !== url);
  check('no_network_requests', requests.length === 1 && others.length === 0, requests.length + ' requests: ' + others.join(' '));
  await browser.close();
  process.exit(failed ? 1 : 0);
})().catch(e => { console.log('not ok browser_check_ran'); console.log('  ' + (e && e.stack || e)); process.exit(1); });
