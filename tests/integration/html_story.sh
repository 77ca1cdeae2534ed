#!/bin/sh
# html_story.sh — the page `poolscope html` writes tells its story on
# opening (issue 30, items 2, 3 and 10), checked in Debian's chromium by
# tests/browser/story_check.js on two traces:
#   - the demo's: refengine with scripts/demo.sh's shape and workload (32
#     ShareGPT-shaped requests, batch 8), recorded the way `make demo` does;
#     with its pool, so the pool panel's figures are held against
#     `poolscope report` (text and --json) and a decode scope's selection is
#     asked for the pool acquires' stacks;
#   - a python3 script recorded with `poolscope record -- python3 ...`
#     (dict and list churn through json: deep stacks, Python frames).
# On each: the cursor opens on the peak with its live flame graph drawn,
# every time-chart line fills its lane, no empty band in a flame graph,
# counts agree in number, no label overflows its box, no console error.
# Screenshots: $BUILD/html-shots/story-demo-*.png and story-py-*.png.
#
# Pool acquires carry stacks (issue 30, item 1): EXPECT_POOL_STACKS=1 makes
# a decode selection without pool stacks a failure (EXPECT_POOL_STACKS=0
# gives story_check.js's "skipped" for a tracer older than that).
. tests/integration/lib.sh
. tests/browser/deps.sh

EXPECT_POOL_STACKS=${EXPECT_POOL_STACKS:-1}
SHOTS=$B/html-shots
D=$T/w
mkdir -p "$D"

# the demo's trace, as scripts/demo.sh records it
SHAPE=dim=256,layers=4,heads=8,kv_heads=4,hidden=768,vocab=8000,seq=1024
"$PS" record -o "$D/demo.pst" -- "$B/bin/refengine" --synthetic $SHAPE --workload sharegpt --requests 32 \
    --max-batch 8 --temperature 16 --seed 42 --json > /dev/null 2> "$D/demo.rec"
check story_demo_recorded [ -s "$D/demo.pst" ]
# a python3 script: dicts built and serialised, most freed, some kept
cat > "$D/work.py" <<'PY'
import json
def build(n):
    return {str(i): [i] * 8 for i in range(n)}
def churn(rounds):
    keep = []
    for r in range(rounds):
        d = build(12000)
        keep.append(json.dumps(d)[: 1000 * (r + 1)])
        del d
    return keep
kept = churn(4)
blob = bytearray(4 << 20)
print(len(kept), len(blob))
PY
"$PS" record -o "$D/py.pst" -- /usr/bin/python3 "$D/work.py" > "$D/py.out" 2> "$D/py.rec"
check story_python_recorded sh -c "[ -s '$D/py.pst' ] && grep -qx '4 4194304' '$D/py.out'"

for n in demo py; do
    "$PS" report "$D/$n.pst" --json > "$D/$n.json" &&
        "$PS" report "$D/$n.pst" > "$D/$n.txt" &&
        "$PS" html "$D/$n.pst" -o "$D/$n.html" --quiet
    check story_${n}_page_written sh -c "[ -s '$D/$n.html' ] && [ -s '$D/$n.json' ] && [ -s '$D/$n.txt' ]"
done
# the demo's pool figures as the report states them (the page is held to these)
check story_demo_report_has_pool_figures grep -q 'peak reserved .* (.*x the peak live' "$D/demo.txt"

check browser_deps_installed browser_deps
rm -f "$SHOTS"/story-*.png
if [ -d "$BROWSER_DIR/node_modules/playwright-core" ]; then
    for n in demo py; do
        pools=
        [ $n = demo ] && pools=--pools
        EXPECT_POOL_STACKS=$EXPECT_POOL_STACKS BROWSER_DEPS=$BROWSER_DIR CHROMIUM=$(command -v chromium) \
            node tests/browser/story_check.js "$D/$n.html" "$D/$n.json" "$D/$n.txt" "$SHOTS" story-$n $pools \
            > "$D/$n.browser" 2>&1
        rc=$?
        sed "s/^\(not \)\{0,1\}ok /&${n}_/" "$D/$n.browser"
        check story_${n}_browser_checks_pass [ $rc -eq 0 ]
    done
    check story_screenshots_saved sh -c "[ -s '$SHOTS/story-demo-1-opening.png' ] && [ -s '$SHOTS/story-demo-4-pools.png' ] &&
        [ -s '$SHOTS/story-demo-5-decode-selection.png' ] && [ -s '$SHOTS/story-py-1-opening.png' ]"
fi
exit $status
