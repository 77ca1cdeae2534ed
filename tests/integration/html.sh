#!/bin/sh
# html.sh — `poolscope html` (issue 16, item 1): the page of a refengine
# trace, checked as a file and in a browser.
#   - the file: one self-contained page (a Content-Security-Policy that
#     forbids external loads, no URL anywhere, the data as JSON); its
#     figures agree with `poolscope report --json` (peaks, leaks, totals; the
#     per-site rows come from a second reading of the model, so their sums
#     are a check of their own);
#   - output safety: the default name, an output that is the input refused,
#     a write that fails (exit 2, nothing left), a bad replay file, a trace
#     cut short (a page, with a warning);
#   - the browser: Debian's chromium, driven headless by playwright-core
#     installed with `npm ci` from tests/browser/package-lock.json into
#     $BUILD/browser (tests/browser/deps.sh; the registry is used there,
#     at setup, never by the page): no console error, no request but the
#     file, the timeline and flame graphs draw, a click on a marker scope
#     changes the flame graph, "jump to peak heap" puts the cursor at
#     report's peak_live_t_ns and shows peak_live_bytes live, the site
#     table, pools, KV and replay panels (tests/browser/html_check.js).
#     Screenshots: $BUILD/html-shots/[0-9]-*.png. What the page tells on
#     opening (the peak, the scales, plurals, labels, the pool figures) is
#     html_story.sh's.
# Without chromium, node or the npm packages the browser checks fail.
. tests/integration/lib.sh

D=$T/w
mkdir -p "$D"
"$PS" record -o "$D/e.pst" -- "$B/bin/refengine" --quiet > /dev/null 2>&1
check record_refengine [ -s "$D/e.pst" ]
"$PS" replay "$D/e.pst" --json > "$D/replay.json" 2> /dev/null
"$PS" report "$D/e.pst" --json --top 100000 > "$D/report.json"

"$PS" html "$D/e.pst" -o "$D/e.html" --replay "$D/replay.json" > "$D/out" 2> "$D/err"
check html_runs sh -c "[ -s '$D/e.html' ] && grep -qx '$D/e.html' '$D/out' && [ ! -s '$D/err' ]"
check html_has_csp_forbidding_external_loads \
    grep -q "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:" "$D/e.html"
check html_names_no_url sh -c "! grep -Eq '(^|[^a-z])(https?|ftp|wss?):|//[a-z0-9-]+\\.[a-z0-9.-]+/' '$D/e.html'"
check html_loads_nothing sh -c "! grep -Eiq '<(link|img|iframe|object|embed)[ >]|<script[^>]* src=' '$D/e.html'"

# the embedded data against the report
check html_data_agrees_with_report python3 - "$D/e.html" "$D/report.json" <<'PY'
import json, re, sys
html = open(sys.argv[1], encoding='utf-8').read()
m = re.search(r'<script type="application/json" id="ps-data">(.*?)</script>', html, re.S)
assert m, 'no data element'
d, r = json.loads(m.group(1)), json.load(open(sys.argv[2]))
def eq(what, got, want):
    assert got == want, '%s: page %r, report %r' % (what, got, want)
p = d['peaks']
eq('peak heap', p['heap'], r['peak_live_bytes'])
eq('peak heap time', p['heap_t'], r['peak_live_t_ns'])
eq('moment of the rows\' heap peak', p['pk_t'][0], r['peak_live_t_ns'])   # the page may open its cursor there
eq('peak RSS', p['rss'], r['peak_rss_bytes'])
eq('leaked bytes', p['leaked_bytes'], r['leaked_bytes'])
eq('total allocated', p['total_allocated'], r['total_allocated_bytes'])
heap = [s for s in d['sites'] if s['k'] == 0]
eq('heap site bytes', sum(s['bytes'] for s in heap), r['total_allocated_bytes'])
eq('heap site calls', sum(s['calls'] for s in heap), r['allocations'])
eq('heap site leaks', sum(s['live'] for s in heap if not s.get('sup')), r['leaked_bytes'])   # suppressed rows: sup
eq('heap site suppressed', sum(s['live'] for s in heap if s.get('sup')), r['suppressed_leaked_bytes'])
eq('heap site temporary', sum(s['temp'] for s in heap), r['temporary_allocations'])
eq('heap sites at the peak', sum(s['pk'][0] for s in heap), r['peak_live_bytes'])
eq('pool site acquires', sum(s['calls'] for s in d['sites'] if s['k'] == 1), r['pool']['acquires'])
eq('timeline heap maximum', max(d['tl']['heap']), r['peak_live_bytes'])
eq('pool misses over time', sum(sum(p.get('miss', [])) for p in d['pools']), r['pool']['misses'])
# each site's buckets add up to its total, and what they leave live to its live bytes
for s in d['sites']:
    b = s['b']
    eq('site bucket bytes', sum(b[1::4]), s['bytes'])
    eq('site bucket calls', sum(b[2::4]), s['calls'])
    eq('site bucket live', sum(b[1::4]) - sum(b[3::4]), s['live'])
names = {l['name'] for l in d['lanes']}
assert {'request', 'prefill', 'decode', 'forward'} <= names, names
eq('replay policies', len(d['replay']['policies']), len(json.load(open(sys.argv[1].replace('e.html', 'replay.json')))['policies']))
PY

# the default name; --phase-frame lanes
cp "$D/e.pst" "$D/f.pst"
"$PS" html "$D/f.pst" --quiet > "$D/out2"
check html_default_name_beside_the_trace sh -c "[ -s '$D/f.html' ] && [ ! -s '$D/out2' ]"
"$PS" html "$D/e.pst" -o "$D/pf.html" --phase-frame re_forward=fwd --quiet
check html_phase_frame_lane grep -q '"lanes":\[.*{"name":"fwd"' "$D/pf.html"

# output safety
cp "$D/e.pst" "$D/keep.pst"
"$PS" html "$D/e.pst" -o "$D/e.pst" 2> "$D/err"; rc=$?
check html_refuses_output_that_is_the_input sh -c "[ $rc -eq 2 ] && cmp -s '$D/e.pst' '$D/keep.pst' && grep -q 'input' '$D/err'"
"$PS" html "$D/e.pst" -o - > /dev/full 2> "$D/err"; rc=$?
check html_write_error_exits_2 sh -c "[ $rc -eq 2 ] && grep -q 'cannot write' '$D/err'"
"$PS" html "$D/e.pst" -o "$D/sub/none/x.html" 2> "$D/err"; rc=$?
check html_missing_directory_exits_2 sh -c "[ $rc -eq 2 ] && [ ! -e '$D/sub' ]"
echo '{"not": "replay"}' > "$D/bad.json"
"$PS" html "$D/e.pst" -o "$D/bad.html" --replay "$D/bad.json" 2> "$D/err"; rc=$?
check html_bad_replay_exits_2_writes_nothing sh -c "[ $rc -eq 2 ] && [ ! -e '$D/bad.html' ] && grep -q 'policies' '$D/err'"
"$PS" html "$D/nothere.pst" -o "$D/n.html" 2> /dev/null; rc=$?
check html_missing_trace_exits_2 sh -c "[ $rc -eq 2 ] && [ ! -e '$D/n.html' ]"
"$PS" html "$D/e.pst" -o "$D/old.html" --quiet && cp "$D/old.html" "$D/old.keep"
"$PS" html "$D/bad.json" -o "$D/old.html" 2> /dev/null; rc=$?
check html_failure_leaves_old_page sh -c "[ $rc -eq 2 ] && cmp -s '$D/old.html' '$D/old.keep' && [ -z \"\$(ls -A '$D' | grep '^\\.old')\" ]"
size=$(wc -c < "$D/e.pst")
head -c $((size / 2)) "$D/e.pst" > "$D/cut.pst"
"$PS" html "$D/cut.pst" -o "$D/cut.html" --quiet 2> "$D/err"; rc=$?
check html_cut_trace_gives_page_with_warning sh -c "[ $rc -eq 0 ] && [ -s '$D/cut.html' ] && grep -q 'warning' '$D/err' &&
    grep -q '\"warning\":\"trace is cut short' '$D/cut.html'"

# the browser
SHOTS=$B/html-shots
. tests/browser/deps.sh
DEPS=$BROWSER_DIR
check browser_deps_installed browser_deps
rm -f "$SHOTS"/[0-9]-*.png        # this script's; others (html_story.sh, cxx_names.sh) keep theirs
if [ -d "$DEPS/node_modules/playwright-core" ]; then
    BROWSER_DEPS=$DEPS CHROMIUM=$(command -v chromium) \
        node tests/browser/html_check.js "$D/e.html" "$D/report.json" "$D/replay.json" "$SHOTS" > "$D/browser.out" 2>&1
    rc=$?
    cat "$D/browser.out"
    check browser_checks_pass [ $rc -eq 0 ]
    check browser_screenshots_saved sh -c "[ \$(ls '$SHOTS'/*.png 2>/dev/null | wc -l) -ge 6 ]"
fi
exit $status
