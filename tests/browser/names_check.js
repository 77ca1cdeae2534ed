// names_check.js — a page of a C++ program with long template names
// (tests/integration/cxx_names.sh), in headless Chromium: the site table
// shows each name with its template arguments folded to <…> and the whole
// name as the cell's title (hover), the stack a click opens has the whole
// name, and no flame-graph label spells the folded arguments. Prints
// "ok NAME" / "not ok NAME" lines; saves a screenshot.
//
//   node names_check.js PAGE.html FULL_NAME SHORT_NAME SHOT.png
// Environment: BROWSER_DEPS (the folder holding node_modules), CHROMIUM.
'use strict';
const path = require('path');
const deps = process.env.BROWSER_DEPS || path.join(__dirname, 'node_modules');
const { chromium } = require(require.resolve('playwright-core', { paths: [deps] }));
const [page_path, full, short, shot] = process.argv.slice(2);

let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log('ok ' + name);
  else { console.log('not ok ' + name); if (detail !== undefined) console.log('  ' + name + ': ' + detail); failed++; }
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
  const errors = [];
  page.on('pageerror', e => errors.push(e.message));
  await page.goto('file://' + path.resolve(page_path), { waitUntil: 'load' });
  await page.waitForFunction(() => window.__poolscope && window.__poolscope.ready, null, { timeout: 60000 });
  const cells = await page.$$eval('td.sname', a => a.map(td => ({ text: td.textContent, title: td.getAttribute('title') || '' })));
  const mine = cells.filter(c => c.text.indexOf('make_all') >= 0);
  check('names_table_folds_templates', mine.length > 0 && mine.every(c => c.text.startsWith(short)),
        JSON.stringify(mine.map(c => c.text)));
  check('names_table_title_is_whole_name', mine.length > 0 && mine.every(c => c.title.startsWith(full)),
        JSON.stringify(mine.map(c => c.title.slice(0, 80))));
  check('names_table_no_template_arguments', cells.every(c => c.text.indexOf('char_traits') < 0),
        JSON.stringify(cells.filter(c => c.text.indexOf('char_traits') >= 0).map(c => c.text.slice(0, 80))));
  const labels = await page.$$eval('svg.flame text', a => a.map(t => t.textContent));
  check('names_flame_labels_folded', labels.length > 0 && labels.every(t => t.indexOf('char_traits') < 0),
        JSON.stringify(labels.filter(t => t.indexOf('char_traits') >= 0).slice(0, 3)));
  /* a click on the row opens its stack: the whole name is there */
  const row = await page.$('tr.site:has(td.sname:has-text("make_all"))');
  if (row) await row.click();
  const stack = await page.$$eval('tr.stack', a => a.map(t => t.textContent).join('\n'));
  check('names_click_shows_whole_name', stack.indexOf(full) >= 0, stack.slice(0, 200));
  check('names_no_page_errors', errors.length === 0, errors.join(' | '));
  await page.screenshot({ path: shot, fullPage: true });
  await browser.close();
  process.exit(failed ? 1 : 0);
})().catch(e => { console.log('not ok names_browser_ran'); console.log('  ' + e.message); process.exit(1); });
