#!/bin/sh
# `make demo`: record an inference run of the reference engine and look at
# its memory. Writes demo-out/: the trace, its SQLite database, report and
# replay (text and JSON), the plots, and summary.md tying them together.
set -eu
BUILD=${BUILD:-build}
OUT=${DEMO_OUT:-demo-out}
PS=$BUILD/bin/poolscope
ENG=$BUILD/bin/refengine
# The long-context small shape; ShareGPT-shaped request lengths.
SHAPE=dim=256,layers=4,heads=8,kv_heads=4,hidden=768,vocab=8000,seq=1024
ENGINE_ARGS="--synthetic $SHAPE --workload sharegpt --requests 32 --max-batch 8 --temperature 16 --seed 42 --json"

step() { printf '\n== demo: %s\n' "$*" >&2; }
t0=$(date +%s)

rm -rf "$OUT"; mkdir -p "$OUT/plots"
# Stacks as record collects them by default (dwarf: README "Sites").
step "1/7 record: refengine ($SHAPE, 32 ShareGPT-shaped requests, batch 8) under poolscope record (dwarf stacks)"
"$PS" record -o "$OUT/engine.pst" -- "$ENG" $ENGINE_ARGS >"$OUT/engine.json"

step "2/7 report"
"$PS" report "$OUT/engine.pst" --top 10 >"$OUT/report.txt"
"$PS" report "$OUT/engine.pst" --json >"$OUT/report.json"

step "3/7 replay: malloc, arena, pool, ideal and the KV policies"
# Tensor stream for the allocator policies; --with-kv makes the arena carry
# the KV blocks too (docs/DESIGN.md, "Buffer pool": why not an arena).
# kv-contiguous reserves the model's whole context per request.
"$PS" replay "$OUT/engine.pst" --policy malloc,arena,pool,ideal,kv --kv-context 1024 >"$OUT/replay.txt"
"$PS" replay "$OUT/engine.pst" --policy malloc,arena,pool,ideal,kv --kv-context 1024 --json >"$OUT/replay.json"
"$PS" replay "$OUT/engine.pst" --policy arena --with-kv >"$OUT/replay-arena-with-kv.txt"

step "4/7 plot"
"$PS" plot "$OUT/engine.pst" -o "$OUT/plots" --replay "$OUT/replay.json"

step "5/7 sql"
"$PS" sql "$OUT/engine.pst" -o "$OUT/engine.sqlite"

step "6/7 html"
"$PS" html "$OUT/engine.pst" -o "$OUT/report.html" --replay "$OUT/replay.json"

step "7/7 summary"
{
    echo "# poolscope demo"
    echo
    echo "A run of \`refengine\` ($SHAPE; 32 requests with ShareGPT-shaped lengths,"
    echo "up to 8 at once) recorded with \`poolscope record\` (dwarf call stacks, the default)."
    echo "The weights are synthetic (random, from seed 42), so the tokens mean nothing; each is sampled at temperature 16 with seed 42 (synthetic logits are far sharper than a trained model's: greedy decoding would repeat each request's last prompt token)."
    echo "Made by \`make demo\` on $(date -u '+%Y-%m-%d %H:%M UTC')."
    echo
    echo "## Report"
    echo
    echo '```'
    cat "$OUT/report.txt"
    echo '```'
    echo
    echo "## KV cache: the report and replay read one model"
    echo
    # both figures come from model/model.c; they agree by construction,
    # and tests/integration/kvutil.sh checks them against an independent count
    python3 - "$OUT/report.json" "$OUT/replay.json" <<'PY'
import json, sys
kv = json.load(open(sys.argv[1]))['kv']
pol = {p['name']: p for p in json.load(open(sys.argv[2]))['policies']}
paged = pol.get('kv-paged', {})
def pct(v):
    return '-' if v is None else '%.1f%%' % (100 * v)
print('| | utilization (time-weighted) | at the peak | per decode step |')
print('|---|---|---|---|')
print('| `report` | %s | %s | %s |' % (pct(kv.get('kv_utilization')), pct(kv.get('kv_utilization_at_peak')),
                                    pct(kv.get('kv_utilization_per_step'))))
print('| `replay` kv-paged | %s | %s | |' % (pct(paged.get('kv_utilization')), pct(paged.get('kv_utilization_at_peak'))))
print()
print('Peak: %d blocks in use.' % kv['peak_blocks_in_use'])
PY
    echo
    echo "## Replay: what this run would cost under other policies"
    echo
    echo '```'
    cat "$OUT/replay.txt"
    echo '```'
    echo
    echo "With the KV blocks as arena objects (\`--with-kv\`):"
    echo
    echo '```'
    cat "$OUT/replay-arena-with-kv.txt"
    echo '```'
    echo
    echo "## Plots"
    echo
    for p in "$OUT"/plots/*.png; do
        [ -f "$p" ] || continue
        echo "![$(basename "$p" .png)](plots/$(basename "$p"))"
    done
    echo
    echo "## Files"
    echo
    echo "- \`report.html\`: the interactive report (open it in a browser; nothing is loaded from the network)"
    echo "- \`engine.pst\`: the trace (\`poolscope report engine.pst\`)"
    echo "- \`engine.sqlite\`: the same as a database (schema: analyzer/SCHEMA.md)"
    echo "- \`engine.json\`: the engine's own statistics; \`report.json\`, \`replay.json\`: the JSON the CI gate reads"
} >"$OUT/summary.md"

printf '\n== demo: done in %ss: %s/summary.md\n' "$(( $(date +%s) - t0 ))" "$OUT" >&2
